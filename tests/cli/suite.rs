//! `test`: suites of cases, the example's and the presets', and a suite
//! file refused for what it repeats.

use super::*;

#[test]
fn test_runs_the_example_suite_and_fails_on_a_wrong_expectation() {
    let o = run(&["test", "examples/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).ends_with("11 passed, 0 failed\n"),
        "{}",
        stdout(&o)
    );

    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    // A suite names files inside its folder: a copy of the examples beside it.
    std::fs::copy("examples/policy.yaml", dir.path().join("policy.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("reviews")).unwrap();
    for entry in std::fs::read_dir("examples/reviews").unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            dir.path().join("reviews").join(entry.file_name()),
        )
        .unwrap();
    }
    let text = std::fs::read_to_string("examples/suite.yaml")
        .unwrap()
        .replacen("expect: denied", "expect: allowed", 1);
    std::fs::write(&suite, text).unwrap();
    let o = run(&["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("FAIL a person strips a pod's finalizer: expected allowed, got denied: "),
        "{out}"
    );
    assert!(out.ends_with("10 passed, 1 failed\n"), "{out}");
}

/// `test` reads a recording's and a case file's review into a JSON value,
/// which keeps the last copy of a repeated key: with the override second, it
/// would judge an override the webhook refuses (400). Such files are refused.
#[test]
fn test_refuses_a_file_that_repeats_a_key() {
    let text =
        std::fs::read_to_string("examples/reviews/pod-strip-finalizers-override.json").unwrap();
    let line = r#""finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off, pod IP 10.244.3.17 released by hand""#;
    let twice = text.replace(
        line,
        &format!("\"finalizer-guard.io/override\": null,\n{line}"),
    );
    assert_ne!(twice, text);
    let dir = tempfile::tempdir().unwrap();
    // A recording of an override, whose object repeats the annotation.
    let recorded = std::fs::read_to_string(
        "tests/fixtures/real/v1.34.4/configmap-paths-configmaps-admin-override.json",
    )
    .unwrap();
    let value = r#""finalizer-guard.io/override": "controller-uninstalled: e2e cleanup""#;
    assert_eq!(recorded.matches(value).count(), 2);
    let recording = dir.path().join("recording.json");
    std::fs::write(
        &recording,
        recorded.replacen(
            value,
            &format!("\"finalizer-guard.io/override\": null, {value}"),
            1,
        ),
    )
    .unwrap();
    let case = dir.path().join("case.json");
    std::fs::write(
        &case,
        format!(
            r#"{{"note": "override sent twice", "review": {twice}, "expect": {{"allowed": true}}}}"#
        ),
    )
    .unwrap();
    for file in [&recording, &case] {
        let file = file.to_str().unwrap();
        let o = run(&["test", file]);
        let out = stdout(&o);
        assert!(
            out.contains(&format!("ERROR {file}"))
                && out.contains("duplicate key \"finalizer-guard.io/override\""),
            "{out}\n{o:?}"
        );
        assert_eq!(o.status.code(), Some(2), "{out}");
    }
}

/// The presets' own tests (examples/presets/suite.yaml, short cases) pass,
/// and cover every finalizer of every component of the catalog: a finalizer
/// added to the catalog without a case fails here.
#[test]
fn the_presets_suite_passes_and_covers_the_whole_catalog() {
    let o = run(&["test", "examples/presets/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    let catalog = run(&["policy", "presets", "-o", "json"]);
    assert_eq!(catalog.status.code(), Some(0), "{}", stderr(&catalog));
    let catalog: serde_json::Value = serde_json::from_slice(&catalog.stdout).unwrap();
    let mut cases = 0;
    for preset in catalog["presets"].as_array().unwrap() {
        for component in preset["components"].as_array().unwrap() {
            let who = format!(
                "{}/{}",
                preset["name"].as_str().unwrap(),
                component["name"].as_str().unwrap()
            );
            for finalizer in component["finalizers"].as_array().unwrap() {
                let finalizer = finalizer.as_str().unwrap();
                let name = match finalizer.strip_suffix('*') {
                    Some(prefix) => format!("{prefix}example"),
                    None => finalizer.to_string(),
                };
                let line = format!("ok   preset {who} removes {name} from ");
                assert!(out.contains(&line), "no passing case {line:?}:\n{out}");
                cases += 1;
            }
            for denied in [
                "a person may not remove",
                "the same name in another namespace may not remove",
            ] {
                assert!(
                    out.lines()
                        .any(|l| l.starts_with(&format!("ok   {denied} "))
                            && l.contains(&format!("(preset {who}): denied"))),
                    "no case: {denied} ... (preset {who}):\n{out}"
                );
                cases += 1;
            }
        }
    }
    assert!(
        out.ends_with(&format!("{cases} passed, 0 failed\n")),
        "{out}"
    );
}

/// Argo CD under `presets: [argocd]` in enforce mode
/// (examples/presets/argocd/suite.yaml): the hook finalizer on a Job, a Pod
/// and a custom resource in application namespaces, and the pre-delete
/// finalizers on an Application, are the application controller's to take
/// off and nobody else's.
#[test]
fn argo_cds_hooks_and_pre_delete_finalizers_pass_under_the_argocd_preset() {
    let o = run(&["test", "examples/presets/argocd/suite.yaml"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for line in [
        "ok   the application controller takes the hook finalizer off a finished PreSync Job in an app namespace: authorized",
        "ok   the application controller takes the hook finalizer off a PostSync Pod in an app namespace: authorized",
        "ok   the application controller takes the hook finalizer off a custom resource hook in another app namespace: authorized",
        "ok   the application controller takes the hook finalizer off finalizer-guard's own policy-check Job: authorized",
        "ok   a person may not take the hook finalizer off a hook Job: denied",
        "ok   the Argo CD server may not take the hook finalizer off a hook Pod: denied",
        "ok   the app namespace's own ServiceAccount may not take the hook finalizer off a hook custom resource: denied",
        "ok   the application controller takes pre-delete-finalizer.argocd.argoproj.io off an Application once its pre-delete hooks ran: authorized",
        "ok   the application controller takes pre-delete-finalizer.argocd.argoproj.io/cleanup off an Application once its pre-delete hooks ran: authorized",
        "ok   the ApplicationSet controller may not take pre-delete-finalizer.argocd.argoproj.io/cleanup off an Application: denied",
    ] {
        assert!(out.lines().any(|l| l == line), "no line {line:?}:\n{out}");
    }
    assert!(out.ends_with("31 passed, 0 failed\n"), "{out}");
}
