//! Reviews recorded from a real kube-apiserver (tests/fixtures/real/, see its
//! README), one folder per release, decide today as they did when recorded,
//! with no cluster.

use std::fs;
use std::path::{Path, PathBuf};

use finalizer_guard::offline::suite;

fn real() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real")
}

/// The release folders (`vMAJOR.MINOR.PATCH`), oldest first; anything else
/// in tests/fixtures/real but its README is an error, named.
fn releases(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "README.md" {
            continue;
        }
        let version = name.strip_prefix('v').map(|v| {
            v.split('.')
                .map(|n| n.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()
        });
        match version {
            Some(Some(parts)) if parts.len() == 3 && entry.path().is_dir() => {
                found.push((parts, name, entry.path()));
            }
            _ => {
                return Err(format!(
                    "{}: not a release folder (vMAJOR.MINOR.PATCH): every recording lives in the folder of the kube-apiserver that sent it",
                    entry.path().display()
                ));
            }
        }
    }
    found.sort();
    Ok(found
        .into_iter()
        .map(|(_, name, path)| (name, path))
        .collect())
}

/// Every failure of every release's recordings, each line naming the release.
fn replay(dir: &Path) -> Result<Vec<String>, String> {
    let mut failed = Vec::new();
    for (release, path) in releases(dir)? {
        let outcomes = suite::run(std::slice::from_ref(&path), None);
        for o in outcomes.iter().filter(|o| o.failure.is_some()) {
            failed.push(format!("kube-apiserver {release}: {}", o.line()));
        }
        // Every kind of decision the real API server produced is represented.
        for decision in ["denied", "override", "authorized"] {
            if !outcomes.iter().any(|o| o.summary.starts_with(decision)) {
                failed.push(format!("kube-apiserver {release}: no {decision} recording"));
            }
        }
    }
    Ok(failed)
}

#[test]
fn reviews_recorded_from_each_real_apiserver_decide_as_recorded() {
    let dir = real();
    let releases = releases(&dir).unwrap();
    let names: Vec<&str> = releases.iter().map(|(n, _)| n.as_str()).collect();
    // The matrix's releases (docs/compatibility.md): the oldest claimed and
    // the newest (e2e/go.mod's), and v1.34.4, the default before it.
    for want in ["v1.28.15", "v1.34.4", "v1.37.2"] {
        assert!(names.contains(&want), "no recordings of {want}: {names:?}");
    }
    for (release, path) in &releases {
        let outcomes = suite::run(std::slice::from_ref(path), None);
        assert!(
            outcomes.len() >= 25,
            "{release}: {} recordings",
            outcomes.len()
        );
    }
    let failed = replay(&dir).unwrap();
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn a_failing_recording_names_its_release() {
    let tmp = tempfile::tempdir().unwrap();
    let source = real().join("v1.34.4");
    for release in ["v1.9.0", "v1.10.1"] {
        let dir = tmp.path().join(release);
        fs::create_dir(&dir).unwrap();
        for name in [
            "dead-node-pods-alice-denied.json",
            "dead-node-pods-alice-override.json",
            "builtin-pods-job-controller-authorized.json",
        ] {
            fs::copy(source.join(name), dir.join(name)).unwrap();
        }
    }
    // A recording of v1.10.1 whose decision no longer holds.
    let path = tmp.path().join("v1.10.1/dead-node-pods-alice-denied.json");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        text.replacen(
            "\"decision\": \"denied\"",
            "\"decision\": \"authorized\"",
            1,
        ),
    )
    .unwrap();
    // Its line names it; v1.9.0's copy of the same file still passes.
    let failed = replay(tmp.path()).unwrap();
    assert!(
        failed
            .iter()
            .all(|l| l.starts_with("kube-apiserver v1.10.1: ")),
        "{failed:#?}"
    );
    assert!(
        failed
            .iter()
            .any(|l| l.starts_with("kube-apiserver v1.10.1: FAIL ")
                && l.contains(
                    "dead-node-pods-alice-denied.json: changed: recorded authorized, now denied"
                )),
        "{failed:#?}"
    );
    // Releases in version order, not by name.
    let names: Vec<String> = releases(tmp.path())
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["v1.9.0", "v1.10.1"]);
}

#[test]
fn a_recording_outside_a_release_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    fs::copy(
        real().join("v1.34.4/dead-node-pods-alice-denied.json"),
        tmp.path().join("dead-node-pods-alice-denied.json"),
    )
    .unwrap();
    let err = replay(tmp.path()).unwrap_err();
    assert!(err.contains("not a release folder"), "{err}");
}
