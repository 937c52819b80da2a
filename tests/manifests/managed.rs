//! The chart on a managed control plane (`managed.platform`: EKS, GKE,
//! AKS), whose kube-apiserver presents webhooks no client certificate: the
//! NetworkPolicy holds the webhook port to where each platform's
//! kube-apiserver calls from, the webhook then writes Events for reviews
//! from there, a platform without such a source fails the render naming
//! it, and what stays off is said (NOTES.txt, the alerts' texts).
//!
//! Needs helm (`FG_HELM`), as `helm.rs`; `#[ignore]`d like its tests.

use super::*;

fn helm() -> PathBuf {
    let path = PathBuf::from(
        std::env::var_os("FG_HELM")
            .expect("FG_HELM names a helm binary (e2e/helm/build.sh prints it)"),
    );
    assert!(path.is_file(), "FG_HELM={} is not a file", path.display());
    path
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/finalizer-guard")
}

/// `helm template finalizer-guard CHART -n finalizer-guard ARGS`: its
/// objects, or what it printed on standard error when it failed.
fn render_in(chart: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(helm())
        .args(["template", "finalizer-guard"])
        .arg(chart)
        .args([
            "--namespace",
            NAMESPACE,
            "--set",
            "policyCheck.enabled=false",
        ])
        .args(args)
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(documents(&String::from_utf8_lossy(&output.stdout)).unwrap())
}

fn render(args: &[&str]) -> Vec<Value> {
    render_in(&chart(), args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
}

fn object<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| {
        text(o, "/kind") == kind
            && text(o, "/metadata/name") == "finalizer-guard"
            && text(o, "/metadata/namespace") == NAMESPACE
    })
}

/// The webhook container's `FINALIZER_GUARD_EVENTS_UNAUTHENTICATED`, if set.
fn events_unauthenticated(objects: &[Value]) -> Option<String> {
    let deployment = object(objects, "Deployment").expect("the webhook's Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "FINALIZER_GUARD_EVENTS_UNAUTHENTICATED")
        .map(|e| e["value"].as_str().unwrap().to_string())
}

fn values_file(yaml: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    file
}

const ADMIN_FROM: &str =
    "adminFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]";

/// Each platform with the source its documentation names: a NetworkPolicy
/// (networkPolicy.enabled left false) admitting the webhook port from that
/// source alone and the admin port from the monitoring namespace as
/// before, and the server told to write Events for reviews from there.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn each_platform_renders_its_sources_and_turns_events_on() {
    let konnectivity = |label: &str| {
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {label: "konnectivity-agent"}},
        })
    };
    let cases = [
        (
            "eks: the control plane's subnets",
            "managed: {platform: eks}\nnetworkPolicy:\n  webhookFrom: [{ipBlock: {cidr: 10.0.0.0/28}}, {ipBlock: {cidr: 10.0.0.16/28}}]\n",
            json!([{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "10.0.0.16/28"}}]),
        ),
        (
            "gke: a private cluster's control-plane range",
            "managed: {platform: gke}\nnetworkPolicy:\n  webhookFrom: [{ipBlock: {cidr: 172.16.0.0/28}}]\n",
            json!([{"ipBlock": {"cidr": "172.16.0.0/28"}}]),
        ),
        (
            "gke: the konnectivity agents",
            "managed: {platform: gke, konnectivity: true}\n",
            json!([konnectivity("k8s-app")]),
        ),
        (
            "aks: the konnectivity agents",
            "managed: {platform: aks, konnectivity: true}\n",
            json!([konnectivity("app")]),
        ),
        (
            "aks: API Server VNet Integration's subnet, and the agents",
            "managed: {platform: aks, konnectivity: true}\nnetworkPolicy:\n  webhookFrom: [{ipBlock: {cidr: 10.225.0.0/28}}]\n",
            json!([{"ipBlock": {"cidr": "10.225.0.0/28"}}, konnectivity("app")]),
        ),
    ];
    for (what, yaml, from) in cases {
        let yaml = format!(
            "{yaml}{}",
            if yaml.contains("networkPolicy:") {
                format!("  {ADMIN_FROM}\n")
            } else {
                format!("networkPolicy:\n  {ADMIN_FROM}\n")
            }
        );
        let values = values_file(&yaml);
        let objects = render(&["-f", values.path().to_str().unwrap()]);
        let policy = object(&objects, "NetworkPolicy").unwrap_or_else(|| panic!("{what}: none"));
        check_object(policy).unwrap_or_else(|e| panic!("{what}: {e}"));
        let deployment = object(&objects, "Deployment").unwrap();
        assert_eq!(
            policy["spec"]["podSelector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"],
            "{what}"
        );
        assert_eq!(
            policy["spec"]["ingress"],
            json!([
                {"ports": [{"port": "webhook", "protocol": "TCP"}], "from": from},
                {"ports": [{"port": "admin", "protocol": "TCP"}],
                 "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
            ]),
            "{what}"
        );
        assert_eq!(
            events_unauthenticated(&objects).as_deref(),
            Some("true"),
            "{what}"
        );
    }

    // Not managed: the NetworkPolicy's sources alone turn nothing on, as
    // before: Events stay the operator's word (events.unauthenticated).
    let objects = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
    ]);
    assert!(object(&objects, "NetworkPolicy").is_some());
    assert_eq!(events_unauthenticated(&objects), None);
    // Managed with Events off: the NetworkPolicy, no Events.
    let objects = render(&[
        "--set",
        "managed.platform=aks,managed.konnectivity=true,events.enabled=false",
    ]);
    assert!(object(&objects, "NetworkPolicy").is_some());
    assert_eq!(events_unauthenticated(&objects), None);
    // And the default: neither.
    let objects = render(&[]);
    assert!(object(&objects, "NetworkPolicy").is_none());
    assert_eq!(events_unauthenticated(&objects), None);
}

/// A platform without the source it needs, or with one that would admit
/// more than its kube-apiserver, fails the render and says what to give.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn a_platform_without_its_sources_fails_naming_what_it_needs() {
    let cases: [(&[&str], &[&str]); 10] = [
        (
            &["--set", "managed.platform=eks"],
            &[
                "managed.platform=eks needs networkPolicy.webhookFrom",
                "ipBlock CIDRs of the subnets",
            ],
        ),
        (
            &["--set", "managed.platform=gke"],
            &[
                "managed.platform=gke needs a source",
                "masterIpv4CidrBlock",
                "managed.konnectivity=true",
            ],
        ),
        (
            &["--set", "managed.platform=aks"],
            &[
                "managed.platform=aks needs a source",
                "managed.konnectivity=true",
                "API Server VNet Integration",
            ],
        ),
        (
            // networkPolicy.enabled changes nothing: still no source.
            &["--set", "managed.platform=eks,networkPolicy.enabled=true"],
            &["managed.platform=eks needs networkPolicy.webhookFrom"],
        ),
        (
            &["--set", "managed.platform=eks,managed.konnectivity=true"],
            &["managed.konnectivity with managed.platform=eks"],
        ),
        (
            &[
                "--set",
                "managed.platform=eks",
                "--set-json",
                r#"networkPolicy.webhookFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}},"podSelector":{"matchLabels":{"app":"x"}}}]"#,
            ],
            &["networkPolicy.webhookFrom[0] is not an ipBlock"],
        ),
        (
            &[
                "--set",
                "managed.platform=aks",
                "--set-json",
                r#"networkPolicy.webhookFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}}}]"#,
            ],
            &[
                "networkPolicy.webhookFrom[0] is neither an ipBlock nor a namespaceSelector with a podSelector",
            ],
        ),
        (
            &[
                "--set",
                "managed.platform=gke",
                "--set-json",
                r#"networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"172.16.0.0/28"}},{"namespaceSelector":{},"podSelector":{}}]"#,
            ],
            &["networkPolicy.webhookFrom[1] is neither"],
        ),
        (
            &[
                "--set",
                "managed.platform=eks",
                "--set-json",
                r#"networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"0.0.0.0/0"}}]"#,
            ],
            &["0.0.0.0/0 is every address"],
        ),
        (
            &[
                "--set",
                "managed.platform=eks,hostNetwork=true",
                "--set",
                "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
            ],
            &["with hostNetwork: no NetworkPolicy applies to pods in the host network"],
        ),
    ];
    for (args, said) in cases {
        let err = render_in(&chart(), args)
            .map(|_| ())
            .expect_err(&format!("{args:?} renders"));
        for words in said {
            assert!(err.contains(words), "{args:?}: {err}");
        }
    }
    // A platform the chart does not know: the schema names the value.
    let err = render_in(&chart(), &["--set", "managed.platform=openshift"]).unwrap_err();
    assert!(err.contains("/managed/platform"), "{err}");
    assert!(err.contains("eks"), "{err}");
}

/// NOTES.txt as `helm install` prints it (`helm template` leaves it out,
/// so a copy of the chart carries it in one more template).
fn notes(args: &[&str]) -> String {
    let copy = crate::helm::copy_chart();
    let chart_copy = copy.path().join("finalizer-guard");
    std::fs::write(
        chart_copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  \
         NOTES.txt: {{ include (printf \"%s/templates/NOTES.txt\" .Chart.Name) . | quote }}\n",
    )
    .unwrap();
    let objects = render_in(&chart_copy, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let notes = objects
        .iter()
        .find(|o| text(o, "/kind") == "ConfigMap" && text(o, "/metadata/name") == "notes")
        .unwrap();
    text(notes, "/data/NOTES.txt").to_string()
}

/// The paragraph of NOTES.txt's list of what is off that starts `- NAME:`.
fn off_paragraph(notes: &str, name: &str) -> Option<String> {
    let list = notes
        .split("Off with these values, and the value that turns each on:")
        .nth(1)?;
    list.split("\n\n- ")
        .find_map(|p| {
            p.trim_start_matches("- ")
                .strip_prefix(&format!("{name}: "))
        })
        .map(|p| p.replace("\n  ", " "))
}

/// A default install says Events are off, where denials are read instead,
/// and the one value that turns them on for a managed control plane; the
/// managed mode takes Events and the NetworkPolicy off that list and says
/// what now holds the port and where its Events are.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn default_notes_list_events_off_and_the_managed_value_that_turns_them_on() {
    let default = notes(&[]);
    let events = off_paragraph(&default, "Events").expect("Events are listed off");
    for words in [
        "none yet",
        "'\"decision\":\"denied\"'",
        "FinalizerStuck",
        "On: on EKS, GKE or AKS, managed.platform=eks|gke|aks",
        "networkPolicy.webhookFrom, or managed.konnectivity=true",
        "--client-ca",
    ] {
        assert!(events.contains(words), "{words}: {events}");
    }
    assert!(off_paragraph(&default, "A NetworkPolicy").is_some());
    // No FinalizerStuck Events to point at without watch's.
    let quiet = off_paragraph(&notes(&["--set", "watch.events=false"]), "Events").unwrap();
    assert!(!quiet.contains("FinalizerStuck"), "{quiet}");
    assert!(!default.contains("Managed control plane ("), "{default}");

    for args in [
        &["--set", "managed.platform=aks,managed.konnectivity=true"][..],
        &[
            "--set",
            "managed.platform=eks",
            "--set",
            "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
        ][..],
    ] {
        let managed = notes(args);
        assert_eq!(
            off_paragraph(&managed, "Events"),
            None,
            "{args:?}: {managed}"
        );
        assert_eq!(off_paragraph(&managed, "A NetworkPolicy"), None, "{args:?}");
        let platform = if args[1].contains("aks") {
            "aks"
        } else {
            "eks"
        };
        assert!(
            managed.contains(&format!("Managed control plane ({platform})")),
            "{managed}"
        );
        assert!(
            managed
                .contains("kubectl get events -A --field-selector reason=FinalizerRemovalDenied"),
            "{managed}"
        );
        assert!(managed.contains("enforces NetworkPolicy"), "{managed}");
        // The records stay unauthenticated: policy suggest still says so.
        assert!(
            off_paragraph(
                &managed,
                "Evidence for `policy suggest` from the webhook's own records"
            )
            .is_some(),
            "{managed}"
        );
    }
}

/// The denial and override alerts send on-call to Events only where these
/// values write them; otherwise to the audit records, saying Events are off,
/// and to watch's FinalizerStuck Events for what a denial leaves stuck.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn alerts_send_on_call_to_events_only_where_they_are_written() {
    let descriptions = |args: &[&str]| -> BTreeMap<String, String> {
        let mut all = vec!["--set", "monitoring.prometheusRule.enabled=true"];
        all.extend_from_slice(args);
        let objects = render(&all);
        let rule = objects
            .iter()
            .find(|o| text(o, "/kind") == "PrometheusRule")
            .expect("the PrometheusRule");
        rule["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .map(|r| {
                (
                    text(r, "/alert").to_string(),
                    text(r, "/annotations/description").to_string(),
                )
            })
            .collect()
    };
    let denied = "kubectl get events -A --field-selector reason=FinalizerRemovalDenied";
    let overridden = "kubectl get events -A --field-selector reason=FinalizerOverride";
    let records = "logs -l app.kubernetes.io/instance=finalizer-guard,app.kubernetes.io/component=webhook --tail=-1";

    let off = descriptions(&[]);
    for alert in [
        "FinalizerGuardDenialSurge",
        "FinalizerGuardServiceAccountDenied",
        "FinalizerGuardOverrideUsed",
    ] {
        let said = &off[alert];
        assert!(said.contains(records), "{alert}: {said}");
        assert!(said.contains("writes no Events"), "{alert}: {said}");
        assert!(
            !said.contains(denied) && !said.contains(overridden),
            "{alert}: {said}"
        );
    }
    assert!(off["FinalizerGuardServiceAccountDenied"].contains("reason=FinalizerStuck"));

    for args in [
        &["--set", "managed.platform=gke,managed.konnectivity=true"][..],
        &["--set", "events.unauthenticated=true"][..],
        &[
            "--set-json",
            r#"extraArgs=["--client-ca=/etc/finalizer-guard/tls/ca.crt"]"#,
        ][..],
    ] {
        let on = descriptions(args);
        for alert in [
            "FinalizerGuardDenialSurge",
            "FinalizerGuardServiceAccountDenied",
        ] {
            assert!(
                on[alert].contains(denied),
                "{args:?} {alert}: {}",
                on[alert]
            );
            assert!(on[alert].contains(records), "{args:?} {alert}");
            assert!(!on[alert].contains("writes no Events"), "{args:?} {alert}");
        }
        assert!(
            on["FinalizerGuardOverrideUsed"].contains(overridden),
            "{args:?}"
        );
    }
    // Managed, with Events switched off: said off again.
    let managed_off = descriptions(&[
        "--set",
        "managed.platform=aks,managed.konnectivity=true,events.enabled=false",
    ]);
    assert!(managed_off["FinalizerGuardDenialSurge"].contains("writes no Events"));

    // watch without its Events: the stuck alert says where to look instead.
    let quiet = descriptions(&["--set", "watch.events=false"]);
    assert!(
        !quiet["FinalizerStuck"].contains("Each has a FinalizerStuck Event"),
        "{}",
        quiet["FinalizerStuck"]
    );
    assert!(quiet["FinalizerStuck"].contains("finalizer-guard unstick -A"));
    assert!(!quiet["FinalizerGuardServiceAccountDenied"].contains("reason=FinalizerStuck"));
    assert!(descriptions(&[])["FinalizerStuck"].contains("Each has a FinalizerStuck Event"));
}
