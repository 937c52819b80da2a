//! Reviews recorded from a real kube-apiserver (tests/fixtures/real/, see its
//! README) decide today as they did when recorded, with no cluster.

use std::path::Path;

use finalizer_guard::offline::suite;

#[test]
fn reviews_recorded_from_a_real_apiserver_decide_as_recorded() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real");
    let outcomes = suite::run(&[dir], None);
    assert!(outcomes.len() >= 25, "{} recordings", outcomes.len());
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.failure.is_some())
        .map(|o| o.line())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    // Every kind of decision the real API server produced is represented.
    for decision in ["denied", "override", "authorized"] {
        assert!(
            outcomes.iter().any(|o| o.summary.starts_with(decision)),
            "no {decision} recording"
        );
    }
}
