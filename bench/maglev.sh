#!/usr/bin/env bash
# What a Maglev table costs (docs/design.md#consistent-hashing-maglev): the build time of the table
# of N equal servers (N = 2, 10, 100, 1,000; M = 65,537, or 655,373 from 656 servers), the time of
# one lookup (a key's hash included) with every server up and with a tenth of them down, and the
# largest share over the average. Pure CPU, one thread: run it on a quiet machine. Then what a
# weight change disrupts: the share of keys moved when one of N = 10, 100, 1,000 equal servers goes
# from weight 1 to 2 and from 2 to 1 (and, to compare, is removed), over 20 random server sets,
# next to the ideal (a pure function of the seeded sets: the same on any machine; alone with
# `cargo run --release -p quill-core --example maglev_cost -- weights`).
#   bash bench/maglev.sh [LOOKUPS]     (default 10,000,000 per case)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --release -p quill-core --example maglev_cost -- "${1:-10000000}"
