"""Data for `bench_search.py`: runs, query sets and a recall set with known answers.

- `conversation_messages(n, seed)`: exactly `n` chat messages from `_corpus.make_conversation`.
- `split_runs(messages, run_size)`: the messages cut into runs of about `run_size`, each run
  starting at a user prompt, as an agent that is called once per few exchanges records them.
- `make_queries(texts, seed)`: about 50 queries of mixed kinds for one conversation: rare terms
  drawn from its own text, common terms, numbers, several words, and questions in plain English.
- `make_recall_conversation(seed)`: a long conversation in which 50 early messages state a
  detail (a path, a number, a name, a decision) and a later search asks for each one with
  other word forms ("we deployed ... to /srv/pay" against "deploy payments service location").

Everything is seeded: the same arguments give the same output.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from search.analyzers import DefaultAnalyzer

try:
    from _corpus import make_conversation
except ModuleNotFoundError:  # imported as `bench._search_corpus` from the repository root
    from bench._corpus import make_conversation

__all__ = [
    'FACTS',
    'Fact',
    'RecallSet',
    'conversation_messages',
    'make_queries',
    'make_recall_conversation',
    'split_runs',
]


def conversation_messages(n_messages: int, seed: int) -> list[ModelMessage]:
    """Exactly `n_messages` messages of one generated conversation (whole exchanges, cut at the end)."""
    exchanges = max(1, n_messages * 10 // 26 + 10)
    messages = make_conversation(exchanges, seed=seed)
    while len(messages) < n_messages:
        exchanges = exchanges * 2
        messages = make_conversation(exchanges, seed=seed)
    return messages[:n_messages]


def _starts_turn(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(part, UserPromptPart) for part in message.parts)


def split_runs(messages: list[ModelMessage], run_size: int = 10) -> list[list[ModelMessage]]:
    """`messages` in consecutive runs: a run ends before the first user prompt once it holds
    `run_size - 2` messages (so runs average about `run_size`)."""
    runs: list[list[ModelMessage]] = []
    current: list[ModelMessage] = []
    for message in messages:
        if current and len(current) >= run_size - 2 and _starts_turn(message):
            runs.append(current)
            current = []
        current.append(message)
    if current:
        runs.append(current)
    return runs


# --- latency queries ------------------------------------------------------------------------------

_COMMON_QUERIES = ('the', 'service', 'tests', 'budget', 'rows', 'assistant', 'user', 'decision')
_MULTI_WORD = (
    'billing service timeout',
    'hotel budget lisbon',
    'rollback version connection pool',
    'backfill invoices rows per second',
    'migration failed IntegrityError resume',
    'on-call rotation scheduler',
    'spot instances savings gateway',
    'retention window audit_log archive',
    'p95 latency since the last deploy',
    'refresh_token tokens cache',
    'flights per person Kyoto Bergen',
    'coverage ranking package',
    'alert threshold nightly batch',
    'pin httpx retry defaults',
    'egress cost notifications',
    'restaurant near the harbour',
)
_QUESTIONS = (
    'what did we decide about the retention window for audit_log',
    'who owns src/billing/invoice.py these days',
    'why did we pin sqlalchemy to that version',
    'how much is the hotel budget for the trip to Montreal',
    'what was the root cause of the 502 errors on the gateway',
    'when does the new engineer start and who do they pair with',
    'how long will the backfill of the events table take',
    'what did Priya and Jonas disagree about in the design review',
)
_COMMON_NUMBERS = ('502', '2025', '10', '00')


def make_queries(texts: list[str], seed: int) -> list[tuple[str, str]]:
    """About 50 `(kind, query)` pairs for the conversation whose indexed texts are `texts`.

    Rare words and numbers are drawn from the rarest the conversation itself holds, so every
    conversation gets queries that do match something.
    """
    rng = random.Random(seed)
    analyzer = DefaultAnalyzer()
    df: Counter[str] = Counter()
    for text in texts:
        df.update(set(analyzer.tokens(text)))
    # The rarest words and numbers the conversation holds (ideally once to three times).
    rare_words = sorted((n, t) for t, n in df.items() if not t.isdigit() and len(t) >= 4)[:200]
    rare_numbers = sorted((n, t) for t, n in df.items() if t.isdigit() and len(t) >= 3)[:50]
    queries: list[tuple[str, str]] = []
    queries += [('rare word', word) for _, word in rng.sample(rare_words, min(10, len(rare_words)))]
    queries += [('common word', word) for word in _COMMON_QUERIES]
    queries += [('number', number) for _, number in rng.sample(rare_numbers, min(4, len(rare_numbers)))]
    queries += [('number', number) for number in _COMMON_NUMBERS]
    queries += [('several words', words) for words in _MULTI_WORD]
    queries += [('question', question) for question in _QUESTIONS]
    return queries


# --- recall with known answers --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fact:
    """A detail stated once, early, and asked for later in other words."""

    statement: str
    """The message that states it."""
    query: str
    """What a model searching for it would type."""
    subject: str
    """What it is about, for messages that mention the subject but not the detail."""


FACTS: tuple[Fact, ...] = (
    Fact('We deployed the payments service to /srv/pay on the new cluster.', 'deploy payments service location', 'payments service'),
    Fact('I configured the nightly backups to run at 02:40 against the read replica.', 'backup configuration time nightly', 'nightly backups'),
    Fact('Marta decided that invoices older than 18 months get archived to Glacier.', 'archiving old invoice decision', 'old invoices'),
    Fact('The staging databases were migrated to Postgres 16.2 last Thursday.', 'migrate staging database postgres version', 'staging databases'),
    Fact("We're rotating the API keys every 45 days from now on.", 'api key rotation period', 'API keys'),
    Fact('Onboarding emails are being sent from noreply@heliograph.dev since the switch.', 'onboarding email sender address', 'onboarding emails'),
    Fact('Karin approved hiring two contractors for the mobile rewrite.', 'approval hire contractor mobile', 'mobile rewrite'),
    Fact('The load balancers are checking health at /healthz/deep every 15 seconds.', 'load balancer health check endpoint', 'load balancers'),
    Fact('We renamed the analytics bucket to heliograph-events-cold.', 'rename analytic bucket', 'analytics bucket'),
    Fact('Feature flags are stored in the tenant_settings table, keyed by tenant id.', 'where feature flag store', 'feature flags'),
    Fact('Our contracts are promising 99.95 percent uptime to enterprise customers.', 'uptime promise enterprise customer', 'enterprise customers'),
    Fact('The search cluster was resized to 7 nodes after the reindexing finished.', 'resize search cluster node count', 'search cluster'),
    Fact('Ravi suggested batching the webhook deliveries in groups of 250.', 'webhook delivery batch size', 'webhook deliveries'),
    Fact('The conference talks were recorded and uploaded to the vimeo channel heliotalks.', 'record conference talk upload', 'conference talks'),
    Fact('We dropped the legacy XML exporters because nobody was downloading the files.', 'drop legacy xml exporter reason', 'XML exporters'),
    Fact('The quarterly offsite was booked at the Fjordhotel in Bergen for 23 people.', 'book quarterly offsite hotel', 'quarterly offsite'),
    Fact('Signing certificates expire on 2026-03-14, so renewals are starting in February.', 'signing certificate expiry renew', 'signing certificates'),
    Fact('The ML team is training the ranking models on 8 A100 GPUs rented from Lambda.', 'train ranking model gpu', 'ranking models'),
    Fact('Customers were complaining that exported PDFs render blank pages in Safari.', 'customer complaint export pdf blank', 'exported PDFs'),
    Fact("We're capping the free tier at 3 projects and 500 builds a month.", 'free tier cap limit', 'free tier'),
    Fact('The mobile builds are signed with the key stored in vault path secret/mobile/signing.', 'mobile build signing key vault', 'mobile builds'),
    Fact('Tomasz volunteered to maintain the translations for Polish and Czech.', 'who maintains translation polish czech', 'translations'),
    Fact('The metrics exporters were scraping every 30 seconds, which overloaded Prometheus.', 'metrics exporter scrape interval prometheus', 'metrics exporters'),
    Fact('We moved the DNS records from GoDaddy to Cloudflare during the outage week.', 'move dns record provider', 'DNS records'),
    Fact("Legal asked that deleted accounts be purged within 30 days, and we're complying.", 'delete account purge deadline legal', 'deleted accounts'),
    Fact('The retries were backing off exponentially, capped at 90 seconds between attempts.', 'retry backoff cap', 'retries'),
    Fact('Snapshots of the volumes are kept for 14 days in the eu-north-1 region.', 'volume snapshot retention region', 'volume snapshots'),
    Fact('The design tokens were exported from Figma into packages/tokens/dist.', 'design token export figma location', 'design tokens'),
    Fact('We standardized on pnpm 9 after the lockfile conflicts kept breaking builds.', 'standardize package manager lockfile conflict', 'lockfile conflicts'),
    Fact('Interviews for the SRE role are happening on Tuesdays with Noor and Oskar.', 'sre role interview schedule', 'SRE role'),
    Fact('The Kafka topics were partitioned into 48 partitions for the clickstream.', 'kafka topic partition count clickstream', 'Kafka topics'),
    Fact('Uploaded avatars are resized to 256 pixels and cached by the CDN.', 'avatar upload resize size', 'uploaded avatars'),
    Fact('The penetration testers found two issues, both fixed in release 4.12.1.', 'penetration test finding fix release', 'penetration testers'),
    Fact('Sessions are expiring after 12 hours of inactivity for admin users.', 'session expiry admin inactive', 'admin sessions'),
    Fact('We budgeted 14,000 euros for the accessibility audits next quarter.', 'accessibility audit budget', 'accessibility audits'),
    Fact('The cron jobs were migrated from the old VM to Kubernetes CronJobs in namespace batch-prod.', 'cron job migration kubernetes namespace', 'cron jobs'),
    Fact('Elif is leading the incident reviews starting with the March outages.', 'who leads incident review', 'incident reviews'),
    Fact('The invoices are numbered with the prefix HLX- followed by the year and a counter.', 'invoice numbering prefix format', 'invoice numbers'),
    Fact('Push notifications were throttled to 4 per user per day after the complaints.', 'push notification throttle limit', 'push notifications'),
    Fact('The data warehouse tables were partitioned by ingestion day and clustered by tenant.', 'warehouse table partition cluster', 'warehouse tables'),
    Fact('We chose Meilisearch over Typesense for the docs search after benchmarking both.', 'choose docs search engine benchmark', 'docs search'),
    Fact('The Android app was rejected twice because the privacy labels were missing.', 'android app rejection reason privacy label', 'Android app'),
    Fact('Staging environments are torn down automatically after 72 hours without deploys.', 'staging environment teardown automatic', 'staging environments'),
    Fact('Chen Wei rewrote the tokenizer benchmarks and they now run in 40 seconds.', 'rewrite tokenizer benchmark runtime', 'tokenizer benchmarks'),
    Fact('The contracts with the freelance designers were renewed until the end of September.', 'renew freelance designer contract', 'freelance designers'),
    Fact('Refunds above 500 dollars are needing approval from finance.', 'refund approval threshold finance', 'refunds'),
    Fact('The postmortems are being published on the internal wiki under Reliability/2025.', 'publish postmortem wiki location', 'postmortems'),
    Fact('We enabled HTTP/3 on the edge proxies, which cut handshakes by 30 percent.', 'enable http3 edge proxy handshake', 'edge proxies'),
    Fact('The unit tests were sharded across 6 runners to get CI under ten minutes.', 'shard unit test runner ci', 'unit tests'),
    Fact('Grafana dashboards are provisioned from the repo folder ops/dashboards via Terraform.', 'grafana dashboard provisioning folder', 'Grafana dashboards'),
)  # fmt: skip

_DISTRACTORS = (
    'Can you remind me later to write up some notes about the {subject}?',
    'The {subject} came up again in the planning meeting; no action for now.',
    'Do we have an owner for the {subject} documentation?',
)
_ACKS = ('Noted, I will keep that in mind.', 'Got it.', 'Thanks, recorded.', 'Understood.')


@dataclass(frozen=True, slots=True)
class RecallSet:
    """A conversation with planted facts: `positions[i]` is the index in `messages` stating `FACTS[i]`."""

    messages: list[ModelMessage]
    positions: list[int]


def make_recall_conversation(seed: int, filler_messages: int = 2400) -> RecallSet:
    """`filler_messages` generated chat messages, with each fact stated (by the user or the
    assistant) at a random turn in the first 40%, and a message naming each fact's subject,
    without the detail, somewhere after it."""
    rng = random.Random(seed)
    filler = conversation_messages(filler_messages, seed)
    turns = [index for index, message in enumerate(filler) if _starts_turn(message)]
    early = [index for index in turns if index < len(filler) * 0.4]
    late = [index for index in turns if index >= len(filler) * 0.4]
    inserts: dict[int, list[tuple[ModelMessage, int | None]]] = {}
    for fact_index, (fact, at) in enumerate(zip(FACTS, rng.sample(early, len(FACTS)), strict=True)):
        if rng.random() < 0.5:
            pair: list[tuple[ModelMessage, int | None]] = [
                (ModelRequest(parts=[UserPromptPart(f'For the record: {fact.statement}')]), fact_index),
                (ModelResponse(parts=[TextPart(rng.choice(_ACKS))]), None),
            ]
        else:
            pair = [
                (ModelRequest(parts=[UserPromptPart('Anything I should know from your side?')]), None),
                (ModelResponse(parts=[TextPart(f'One update: {fact.statement}')]), fact_index),
            ]
        inserts.setdefault(at, []).extend(pair)
        mention = rng.choice(_DISTRACTORS).format(subject=fact.subject)
        inserts.setdefault(rng.choice(late), []).extend(
            [(ModelRequest(parts=[UserPromptPart(mention)]), None), (ModelResponse(parts=[TextPart('Sure.')]), None)]
        )
    messages: list[ModelMessage] = []
    positions = [0] * len(FACTS)
    for index, message in enumerate(filler):
        for planted, fact_index in inserts.get(index, []):
            if fact_index is not None:
                positions[fact_index] = len(messages)
            messages.append(planted)
        messages.append(message)
    return RecallSet(messages, positions)
