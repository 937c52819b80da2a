//! The chart's NOTES: where the image comes from, how to enforce, and what
//! the values leave off and how to turn it on.

use super::*;

/// NOTES.txt as `helm install` prints it. `helm template` leaves NOTES.txt
/// out, so a copy of the chart gets one more template that carries it.
fn notes(helm: &Path, args: &[&str]) -> String {
    let copy = copy_chart();
    let chart_copy = copy.path().join("finalizer-guard");
    std::fs::write(
        chart_copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  \
         NOTES.txt: {{ include (printf \"%s/templates/NOTES.txt\" .Chart.Name) . | quote }}\n",
    )
    .unwrap();
    let mut full = vec![
        "template",
        RELEASE,
        chart_copy.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/zz-notes.yaml",
    ];
    full.extend_from_slice(args);
    let run = run_helm(helm, &full);
    assert!(run.ok, "helm {}: {}", full.join(" "), run.stderr);
    let docs = documents(&run.stdout).unwrap();
    text(&docs[0], "/data/NOTES.txt").to_string()
}

/// The install notes say where the image comes from, how the webhook fails,
/// and a path from warn to enforce whose commands work: the log command
/// selects the webhook's pods and prints lines `policy suggest` can read.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn install_notes_say_where_the_image_comes_from_and_how_to_enforce() {
    let helm = helm();
    let warn = notes(&helm, &[]);
    for said in [
        "The pods run the image finalizer-guard:0.1.0",
        "a name no registry\nserves",
        "Dockerfile",
        "docker build -t REGISTRY/finalizer-guard:0.1.0 .    # or: podman build",
        "--set image.repository=REGISTRY/finalizer-guard",
        "fails open (failurePolicy Ignore)",
        "WARN mode",
        "finalizer-guard policy suggest --merge policy.yaml finalizer-guard-audit.jsonl",
        "On a managed control plane (EKS, GKE, AKS), where kube-apiserver can be",
        "finalizer-guard doctor --cluster --policy merged.yaml",
        "kubectl -n finalizer-guard get configmap finalizer-guard-policy",
        "--set policy.mode=enforce",
    ] {
        assert!(warn.contains(said), "NOTES.txt lacks {said:?}:\n{warn}");
    }
    assert!(
        !warn.contains("fails closed (failurePolicy Fail)"),
        "{warn}"
    );
    // A release's chart names the published image: the notes say how to
    // verify and pin it, and build nothing.
    let released = notes(
        &helm,
        &[
            "--set",
            "image.repository=ghcr.io/finalizer-guard/finalizer-guard",
        ],
    );
    for said in [
        "The pods run the image ghcr.io/finalizer-guard/finalizer-guard:0.1.0.",
        "cosign verify ghcr.io/finalizer-guard/finalizer-guard:0.1.0",
        "--set image.digest=sha256:",
    ] {
        assert!(
            released.contains(said),
            "NOTES.txt lacks {said:?}:\n{released}"
        );
    }
    assert!(!released.contains("docker build"), "{released}");

    // The logs: every pod's, whole, unprefixed (a `[pod/...]` prefix makes
    // the lines unreadable to `policy suggest`).
    let logs = warn
        .lines()
        .skip_while(|l| !l.contains(" logs -l "))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!logs.is_empty(), "no kubectl logs command:\n{warn}");
    assert!(!logs.contains("--prefix"), "{logs}");
    assert!(!logs.contains("| grep"), "{logs}");
    assert!(
        logs.contains("--tail=-1"),
        "all lines, not the last 10: {logs}"
    );
    assert!(logs.contains("> finalizer-guard-audit.jsonl"), "{logs}");
    let selector = logs
        .split(" -l ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let rendered = template(&helm, &[]);
    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let labels = deployment.spec.template.metadata.unwrap().labels.unwrap();
    for pair in selector.split(',') {
        let (key, value) = pair.split_once('=').unwrap();
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "kubectl logs -l {selector} selects the webhook's pods"
        );
    }

    let enforce = notes(
        &helm,
        &[
            "--set",
            "policy.mode=enforce,image.repository=registry.example.com/fg,image.tag=1.2.3",
        ],
    );
    for said in [
        "The pods run the image registry.example.com/fg:1.2.3",
        "fails closed (failurePolicy Fail)",
        "ENFORCE mode",
        "finalizer-guard doctor --cluster",
    ] {
        assert!(
            enforce.contains(said),
            "NOTES.txt lacks {said:?}:\n{enforce}"
        );
    }
}

/// The paragraphs of NOTES.txt's "Off with these values" list, by their
/// first words (up to the first `:`).
fn off_list(notes: &str) -> BTreeMap<String, String> {
    let Some(list) = notes
        .split("Off with these values, and the value that turns each on:")
        .nth(1)
    else {
        return BTreeMap::new();
    };
    let list = list.split("\nBreak-glass of last resort").next().unwrap();
    list.split("\n\n- ")
        .skip(1)
        .map(|p| {
            let p = p.trim_start_matches("- ").replace("\n  ", " ");
            let (name, rest) = p.split_once(": ").unwrap();
            (name.to_string(), rest.trim().to_string())
        })
        .collect()
}

/// A default install leaves nothing off without saying so: NOTES.txt lists
/// each feature the values leave off, the value that turns it on (which
/// `helm template` then takes), and its cost; a feature turned on leaves the
/// list, and one turned off joins it.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn install_notes_say_what_the_values_leave_off_and_how_to_turn_it_on() {
    let helm = helm();
    let default = off_list(&notes(&helm, &[]));
    let expected = [
        ("Events", "events.unauthenticated=true"),
        (
            "Evidence for `policy suggest` from the webhook's own records",
            "--trust-unauthenticated",
        ),
        ("Alerts", "monitoring.prometheusRule.enabled=true"),
        ("A NetworkPolicy", "networkPolicy.enabled=true"),
        ("The backstop", "backstop.enabled=true"),
        ("Secrets for on-call", "oncallRole.secrets=true"),
        ("The two-person override", "policy.override.approval"),
    ];
    assert_eq!(
        default.keys().cloned().collect::<BTreeSet<_>>(),
        expected
            .iter()
            .map(|(k, _)| k.to_string())
            .collect::<BTreeSet<_>>(),
        "{default:#?}"
    );
    for (feature, value) in expected {
        let said = &default[feature];
        assert!(said.contains(value), "{feature}: {said}");
        assert!(
            said.contains(" On: ") || said.contains(". On:"),
            "{feature} says how to turn it on: {said}"
        );
    }
    assert!(
        default["Events"].contains("--client-ca"),
        "{}",
        default["Events"]
    );
    assert!(
        default["Events"].contains("'\"decision\":\"denied\"'"),
        "where denials are without Events"
    );
    // Each "On:" value turns its line off (and renders); --client-ca, two.
    for (args, gone) in [
        (vec!["--set", "events.unauthenticated=true"], vec!["Events"]),
        (
            vec![
                "--set-json",
                r#"extraArgs=["--client-ca=/etc/finalizer-guard/tls/ca.crt"]"#,
            ],
            vec![
                "Events",
                "Evidence for `policy suggest` from the webhook's own records",
            ],
        ),
        (
            vec![
                "--set",
                "monitoring.prometheusRule.enabled=true,monitoring.serviceMonitor.enabled=true",
            ],
            vec!["Alerts"],
        ),
        (
            vec!["--set", "networkPolicy.enabled=true"],
            vec!["A NetworkPolicy"],
        ),
        (
            vec!["--set", "oncallRole.secrets=true"],
            vec!["Secrets for on-call"],
        ),
        (
            vec![
                "--set-json",
                r#"policy.override.approval={"groups":["sre"],"maxAge":"2h"}"#,
            ],
            vec!["The two-person override"],
        ),
    ] {
        let list = off_list(&notes(&helm, &args));
        let left: BTreeSet<&String> = default
            .keys()
            .filter(|k| !gone.contains(&k.as_str()))
            .collect();
        assert_eq!(list.keys().collect::<BTreeSet<_>>(), left, "{args:?}");
    }
    // --client-ca turns Events on too.
    let verified = off_list(&notes(
        &helm,
        &[
            "--set-json",
            r#"extraEnv=[{"name":"FINALIZER_GUARD_CLIENT_CA","value":"/ca.crt"}]"#,
        ],
    ));
    assert!(
        !verified.contains_key("Events")
            && !verified
                .contains_key("Evidence for `policy suggest` from the webhook's own records"),
        "{verified:#?}"
    );
    // Turned off, listed.
    let off = off_list(&notes(
        &helm,
        &[
            "--set",
            "events.enabled=false,watch.enabled=false,policyCheck.enabled=false,oncallRole.enabled=false,monitoring.prometheusRule.enabled=true",
        ],
    ));
    for (feature, value) in [
        ("Events", "events.enabled=true"),
        ("watch", "watch.enabled=true"),
        ("The policy check", "policyCheck.enabled=true"),
        ("The on-call role", "oncallRole.enabled=true"),
        (
            "Scrapes for the alerts",
            "monitoring.serviceMonitor.enabled=true",
        ),
    ] {
        assert!(
            off.get(feature).is_some_and(|s| s.contains(value)),
            "{feature}: {off:#?}"
        );
    }
    assert!(
        !off.contains_key("Secrets for on-call"),
        "no role, no line about its Secrets"
    );
    let quiet = off_list(&notes(&helm, &["--set", "watch.events=false"]));
    assert!(
        quiet
            .get("FinalizerStuck Events")
            .is_some_and(|s| s.contains("watch.events=true")),
        "{quiet:#?}"
    );
    // The warn-mode path says what `policy suggest` makes of unverified records.
    let warn = notes(&helm, &[]);
    assert!(warn.contains("--trust-unauthenticated"), "{warn}");
}
