#!/usr/bin/env bash
# What a Maglev table costs (docs/design.md#consistent-hashing-maglev): the build time of the table
# of N equal servers (N = 2, 10, 100, 1,000; M = 65,537, or 655,373 from 656 servers), the time of
# one lookup (a key's hash included) with every server up and with a tenth of them down, and the
# largest share over the average. Pure CPU, one thread: run it on a quiet machine.
#   bash bench/maglev.sh [LOOKUPS]     (default 10,000,000 per case)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --release -p quill-core --example maglev_cost -- "${1:-10000000}"
