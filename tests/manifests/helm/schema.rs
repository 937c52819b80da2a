//! `values.schema.json`: a misspelled or mistyped value refused and named,
//! the chart following the crate's version and the policy's fields.

use super::*;

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn schema_refuses_a_misspelled_or_mistyped_value_and_names_it() {
    let helm = helm();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for (set, needle) in [
        ("replica=3", "replica"),
        ("replicas=two", "replicas"),
        ("replicas=0", "replicas"),
        ("policy.mode=block", "mode"),
        (
            "policy.rules[0].finalizers={a},policy.rules[0].usrs={alice}",
            "usrs",
        ),
        ("policy.override.annotation=not a key", "annotation"),
        ("certificates.source=vault", "source"),
        ("certificates.generated.days=soon", "days"),
        ("certificates.self.extraDNSNames={a b}", "extraDNSNames"),
        (
            "certificates.self.extraDNSNames={10.0.0.1}",
            "extraDNSNames",
        ),
        (
            "certificates.generated.extraDNSNames={Webhook.Example.com}",
            "extraDNSNames",
        ),
        ("events.enable=false", "enable"),
        ("policyCheck.enable=false", "enable"),
        ("oncallRole.enabled=yes", "enabled"),
        ("certificates.external.caBundle=not base64!", "caBundle"),
        ("certificates.external.bundle=x", "bundle"),
        ("logFormat=xml", "logFormat"),
        ("webhook.failurePolicy=Open", "failurePolicy"),
        ("webhook.timeoutSeconds=31", "timeoutSeconds"),
        ("webhook.timeoutSeconds=0", "timeoutSeconds"),
        ("webhook.timeout=3", "timeout"),
        ("extraArgs[0].flag=x", "extraArgs"),
        ("extraVolumeMounts[0].name=data", "mountPath"),
        ("extraEnv[0].value=x", "name"),
        (
            "policy.builtinIdentities[0].controller=nope,policy.builtinIdentities[0].users={x}",
            "controller",
        ),
    ] {
        for command in ["template", "lint"] {
            let args: Vec<&str> = match command {
                "template" => vec!["template", RELEASE, chart, "--set", set],
                _ => vec!["lint", chart, "--set", set],
            };
            let run = run_helm(&helm, &args);
            let said = format!("{}{}", run.stdout, run.stderr);
            assert!(!run.ok, "helm {command} --set {set} passed:\n{said}");
            assert!(
                said.contains("values don't meet the specifications of the schema"),
                "helm {command} --set {set}: not the schema:\n{said}"
            );
            assert!(
                said.contains(needle),
                "helm {command} --set {set}: {needle} not named:\n{said}"
            );
        }
    }
    let lint = run_helm(&helm, &["lint", "--strict", chart]);
    assert!(
        lint.ok,
        "helm lint --strict: {}{}",
        lint.stdout, lint.stderr
    );
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn chart_follows_the_crate_and_the_policy_schema() {
    let chart_yaml: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        chart_yaml["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "the chart installs this release"
    );

    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let policy = Policy::from_yaml(&serde_yaml_ng::to_string(&values["policy"]).unwrap()).unwrap();
    assert_eq!(policy.mode, Mode::Warn, "first install: warn");

    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let enumerated: Vec<&str> = schema
        .pointer("/properties/policy/properties/builtinIdentities/items/properties/controller/enum")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut known = vec!["kube-controller-manager"];
    known.extend(BUILTIN_CONTROLLERS.iter().map(|c| c.name));
    assert_eq!(
        enumerated, known,
        "the schema lists src/policy/builtin.rs's controllers"
    );
}

/// The fields the policy parser knows where `yaml` names an unknown one, as
/// its error lists them ("expected one of `a`, `b`").
fn policy_fields(yaml: &str) -> BTreeSet<String> {
    let error = Policy::from_yaml(yaml).unwrap_err().to_string();
    let expected = error
        .split_once("expected")
        .unwrap_or_else(|| panic!("{yaml:?}: {error}"))
        .1;
    let expected = expected.split(" at line").next().unwrap();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every policy field the server reads is one the schema lets through, and
/// the schema allows no field the server would refuse.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_schema_knows_every_policy_field() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let policy = &schema["properties"]["policy"];
    for (yaml, pointer) in [
        ("bogus: 1\n", ""),
        ("rules:\n  - bogus: 1\n", "/properties/rules/items"),
        (
            "builtinIdentities:\n  - bogus: 1\n",
            "/properties/builtinIdentities/items",
        ),
        ("override:\n  bogus: 1\n", "/properties/override"),
        (
            "override:\n  approval:\n    bogus: 1\n",
            "/properties/override/properties/approval",
        ),
    ] {
        let object = policy.pointer(pointer).unwrap();
        assert_eq!(
            object["additionalProperties"],
            json!(false),
            "policy{pointer}: closed"
        );
        let in_schema: BTreeSet<String> = object["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            in_schema,
            policy_fields(yaml),
            "values.schema.json policy{pointer} and the policy parser disagree"
        );
    }
}
