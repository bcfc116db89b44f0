"""The tuning database: one JSON file per (arch family, kernel family), in two tiers.

Files live at ``<root>/<arch>/<family.stem>.json`` under the system tier (shipped, reviewed)
or the user tier (this machine's, written by builds and autotune). This package owns the
file format (:mod:`.schema`, :mod:`.codec`, :mod:`.migrations`), signature keys
(:mod:`.keys`), the tiers' roots (:mod:`.paths`), hard and soft validators (:mod:`.loader`,
:mod:`.validators`), the locked merging writer (:mod:`.writer`) and diffs (:mod:`.diff`).
Epochs and tier precedence belong to the runtime, which reads files through
:func:`load_tuning_file`.
"""

from __future__ import annotations

from .diff import describe_choices, diff_files
from .keys import SignatureKey, check_key, parse_signature_key, signature_key
from .loader import (
    check_entry,
    check_tuning_file,
    load_tuning_file,
    open_tuning_file,
    read_tuning_file,
)
from .migrations import MIGRATIONS, SchemaTooNewError
from .paths import (
    DISABLED_VALUES,
    SYSTEM_ENV,
    USER_ENV,
    default_system_root,
    system_root,
    tier_path,
    user_root,
)
from .schema import (
    SCHEMA_VERSION,
    ArchStamp,
    Entry,
    Region,
    Source,
    TuningFile,
    Validators,
    canonical_json,
)
from .validators import (
    WILDCARD,
    stale_entries,
    stale_reasons,
)
from .writer import KEEP, EntryChange, EntryUpdate, Keep, TuningDatabaseWarning, write_entries

__all__ = [
    "DISABLED_VALUES",
    "KEEP",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SYSTEM_ENV",
    "USER_ENV",
    "WILDCARD",
    "ArchStamp",
    "Entry",
    "EntryChange",
    "EntryUpdate",
    "Keep",
    "Region",
    "SchemaTooNewError",
    "SignatureKey",
    "Source",
    "TuningDatabaseWarning",
    "TuningFile",
    "Validators",
    "canonical_json",
    "check_entry",
    "check_key",
    "check_tuning_file",
    "default_system_root",
    "describe_choices",
    "diff_files",
    "load_tuning_file",
    "open_tuning_file",
    "parse_signature_key",
    "read_tuning_file",
    "signature_key",
    "stale_entries",
    "stale_reasons",
    "system_root",
    "tier_path",
    "user_root",
    "write_entries",
]
