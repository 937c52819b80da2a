//! The README's install on two nodes: the webhook's pods spread, serving
//! through the chart's Service, denying as documented.

use super::*;

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn chart_installs_unmodified_on_two_nodes_and_denies_through_its_service() {
    let n = nodes();
    n.uninstalled();
    n.install();
    n.wait_spread();

    // kube-apiserver calls the chart's Service: no url, the CA the pods
    // made and wrote into the caBundle (certificates.source self, the default).
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    let client = &config["webhooks"][0]["clientConfig"];
    assert_eq!(client["service"]["name"], FULLNAME, "{config:#}");
    assert_eq!(client["service"]["namespace"], NAMESPACE, "{config:#}");
    assert!(client["url"].is_null(), "{config:#}");
    assert!(
        client["caBundle"].as_str().is_some_and(|b| !b.is_empty()),
        "{config:#}"
    );
    // The pods run the image given (FG_IMAGE, FG_IMAGE_DIGEST), as the chart runs it.
    let deploy = n.get(&["deployment", FULLNAME, "-n", NAMESPACE]);
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], n.image_ref(), "{deploy:#}");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(deploy["status"]["readyReplicas"], 2, "{deploy:#}");

    let ns = "nodes-chart";
    n.namespace(ns);
    n.held_configmap(ns, "held");

    // Warn mode, as installed: alice's strip goes through, with a warning.
    let warned = n.strip("configmap", "held", ns);
    assert_eq!(warned.code, 0, "{warned:#?}");
    assert!(warned.stderr.contains("Warning:"), "{warned:#?}");

    // Enforcing: the same strip is denied, by the pods, through the Service.
    n.enforce();
    n.wait_spread();
    n.held_configmap(ns, "held");
    let strip = n.strip("configmap", "held", ns);
    assert_eq!(strip.code, 1, "{strip:#?}");
    assert!(strip.stderr.contains(&denied()), "{strip:#?}");
    let held = n.get(&["configmap", "held", "-n", ns]);
    assert_eq!(held["metadata"]["finalizers"], json!([HOLD]), "{held:#}");
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail", "{config:#}");
    n.release_namespace(ns);
}
