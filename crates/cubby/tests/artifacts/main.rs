//! Artifacts wired to the runs (SPEC §5.1): the per-run store, tool
//! results, `$CUBBY_OUTPUT_DIR`, `view_file`, seeding a run.

mod store;
