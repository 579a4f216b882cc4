"""How many seeds a cell gets: `--seeds auto` (the sequential procedure and its Tune searcher) and
`--confirm` on fresh seeds."""
