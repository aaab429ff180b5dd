"""The log's logic, written once over the `_storage` transaction protocols.

Every backend runs these functions inside its own transactions, so appends, records,
replay, management and verification behave identically everywhere and one conformance
suite covers them all. The logic lives in parts, each read top-down:

- `_keys`: the keyspace (tables, keys, stored values and their codecs; the layout notes);
- `_checks`: checks on what callers hand the log;
- `_append`: the write path (`append_entries` and each kind's rule);
- `_read`: the read model (entries, records, branches, transcripts, context);
- `_admin`: the format record and migration, forks and deletions.

This module gathers their names for the backends and the log's front end.
"""

from __future__ import annotations

from eventlog._admin import (
    check_format,
    clear_scrub_pending,
    delete_conversation,
    fork,
    init_format,
    migrate,
    readable_as_is,
    scrub_pending,
)
from eventlog._append import append_entries, utcnow
from eventlog._checks import check_count, check_id, check_seq, validate_messages
from eventlog._keys import (
    FORMAT_VERSION,
    HASH_SIZE,
    MAX_ID_BYTES,
    StoredBody,
    StoredRun,
    chain_hash,
    ck,
    decode_body,
    decode_conversation,
    decode_id,
    decode_run,
    encode_body_of,
    encode_run,
    key_seq,
    run_idem_prefix,
    seq_key,
)
from eventlog._read import (
    branch_bodies,
    context_payloads,
    context_tip,
    decode_payloads,
    fold_context,
    get_conversation,
    get_entry,
    get_entry_head,
    get_run,
    iter_entries,
    iter_entry_heads,
    join_payloads,
    last_seq,
    list_conversations,
    list_runs,
    run_message_payloads,
    to_entry,
    transcript_payloads,
)
from eventlog.entries import KINDS

__all__ = [
    'FORMAT_VERSION',
    'HASH_SIZE',
    'KINDS',
    'MAX_ID_BYTES',
    'StoredBody',
    'StoredRun',
    'append_entries',
    'branch_bodies',
    'chain_hash',
    'check_count',
    'check_format',
    'check_id',
    'check_seq',
    'ck',
    'clear_scrub_pending',
    'context_payloads',
    'context_tip',
    'decode_body',
    'decode_conversation',
    'decode_id',
    'decode_payloads',
    'decode_run',
    'delete_conversation',
    'encode_body_of',
    'encode_run',
    'fold_context',
    'fork',
    'get_conversation',
    'get_entry',
    'get_entry_head',
    'get_run',
    'init_format',
    'iter_entries',
    'iter_entry_heads',
    'join_payloads',
    'key_seq',
    'last_seq',
    'list_conversations',
    'list_runs',
    'migrate',
    'readable_as_is',
    'run_idem_prefix',
    'run_message_payloads',
    'scrub_pending',
    'seq_key',
    'to_entry',
    'transcript_payloads',
    'utcnow',
    'validate_messages',
]
