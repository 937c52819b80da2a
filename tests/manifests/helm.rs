//! The Helm chart in `charts/finalizer-guard`, the one source of what
//! `manifests/` installs: `scripts/render-manifests.sh` renders it there, and
//! a test fails when what is committed is not what renders. What the
//! overlays add by hand (cert-manager's CA injection, the self-managed
//! Secret and caBundle) is compared with the chart's own way of doing it.
//! The rest, one file an area under `helm/`: the chart's certificates,
//! values, notes, schema, policy check, on-call Role, skipped identities
//! and NetworkPolicy.
//!
//! Needs a helm binary: `FG_HELM`, or the one `e2e/helm/build.sh` caches.
//! The tests are `#[ignore]`d, so `cargo test` says they did not run;
//! `.ci/run` builds helm, sets `FG_HELM` and runs them with `--ignored`.

use super::*;

use finalizer_guard::policy::builtin::BUILTIN_CONTROLLERS;

#[path = "helm/certificates.rs"]
mod certificates;
#[path = "helm/network.rs"]
mod network;
#[path = "helm/notes.rs"]
mod notes;
#[path = "helm/oncall.rs"]
mod oncall;
#[path = "helm/policy_check.rs"]
mod policy_check;
#[path = "helm/schema.rs"]
mod schema;
#[path = "helm/skip.rs"]
mod skip;
#[path = "helm/values.rs"]
mod values;

/// The release name and namespace under which the chart's names are the
/// names of `manifests/`.
pub(crate) const RELEASE: &str = "finalizer-guard";

pub(crate) use crate::common::repository::chart;
pub(crate) use crate::common::tools::helm;

/// What one helm run printed, and how it exited.
pub(crate) struct HelmRun {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn run_helm(helm: &Path, args: &[&str]) -> HelmRun {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(helm);
    cmd.args(args)
        // No user configuration or repositories leak in.
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG");
    let run = crate::common::run::run(cmd, None);
    HelmRun {
        ok: run.code == 0,
        stdout: run.stdout,
        stderr: run.stderr,
    }
}

/// `helm template finalizer-guard charts/finalizer-guard -n finalizer-guard ARGS`.
pub(crate) fn template(helm: &Path, args: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut full = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    full.extend_from_slice(args);
    let run = run_helm(helm, &full);
    assert!(run.ok, "helm {}: {}", full.join(" "), run.stderr);
    documents(&run.stdout).unwrap_or_else(|e| panic!("helm template printed no YAML: {e}"))
}

/// Labels only Helm's objects carry, which manifests/ leaves out.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn without_helm_labels(object: &Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for key in HELM_LABELS {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut object = object.clone();
    strip(&mut object);
    object
}

pub(crate) fn find<'a>(objects: &'a [Value], id: &str) -> Option<&'a Value> {
    objects.iter().find(|o| describe(o) == id)
}

pub(crate) fn check_all(objects: &[Value]) {
    for object in objects {
        if let Err(e) = check_object(object) {
            panic!("helm template: {}: {e}", describe(object));
        }
    }
}

/// Every file under `dir`, by its path below it.
fn files_below(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(here) = stack.pop() {
        for entry in std::fs::read_dir(&here).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// What `scripts/render-manifests.sh` writes is what `manifests/` holds:
/// the script, run into a folder of its own, and `diff -u` for each file
/// that differs. The files it does not write (base/namespace.yaml and the
/// kustomizations of manifests/ and its overlays) are kept by hand; any other file in the base
/// would be one nobody renders.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn manifests_are_what_the_chart_renders() {
    let helm = helm();
    let root = repository::root();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(root.join("scripts/render-manifests.sh"))
        .arg(out.path())
        .env("FG_HELM", &helm)
        .env("FG_BIN", env!("CARGO_BIN_EXE_finalizer-guard"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "scripts/render-manifests.sh: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rendered = files_below(out.path());
    let by_hand = [
        "kustomization.yaml",
        "vap/kustomization.yaml",
        "components/backstop/kustomization.yaml",
        "base/namespace.yaml",
        "overlays/cert-manager/kustomization.yaml",
        "overlays/self-managed/kustomization.yaml",
    ];
    let committed: BTreeSet<PathBuf> = files_below(&manifests())
        .into_iter()
        .filter(|p| !by_hand.iter().any(|h| p == Path::new(h)))
        // The self-managed overlay's certificate files, git-ignored.
        .filter(|p| !p.starts_with("overlays/self-managed"))
        .collect();
    assert!(
        rendered.contains(Path::new("base/deployment.yaml"))
            && rendered.contains(Path::new("overlays/cert-manager/certificates.yaml")),
        "{rendered:?}"
    );
    let mut problems = Vec::new();
    for file in rendered.union(&committed) {
        let (ours, theirs) = (manifests().join(file), out.path().join(file));
        if !ours.is_file() {
            problems.push(format!(
                "manifests/{}: rendered, not committed",
                file.display()
            ));
            continue;
        }
        if !theirs.is_file() {
            problems.push(format!(
                "manifests/{}: committed, not rendered",
                file.display()
            ));
            continue;
        }
        let diff = Command::new("diff")
            .arg("-u")
            .arg(&ours)
            .arg(&theirs)
            .output()
            .expect("diff runs");
        if !diff.status.success() {
            problems.push(String::from_utf8_lossy(&diff.stdout).into_owned());
        }
    }
    assert!(
        problems.is_empty(),
        "manifests/ is not what charts/finalizer-guard renders: run scripts/render-manifests.sh\n{}",
        problems.join("\n")
    );
}

/// The objects of a kustomize build are those of the chart for the same
/// settings, but for the Namespace (Helm installs into one) and what the
/// chart leaves out (`also`), Helm's labels set aside.
fn assert_same_objects(chart: &[Value], built: &[Value], also: &[&str], what: &str) {
    let ids = |objects: &[Value]| -> Vec<String> {
        let mut ids: Vec<String> = objects
            .iter()
            .filter(|o| text(o, "/kind") != "Namespace")
            .map(describe)
            .filter(|id| !also.contains(&id.as_str()))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(built), ids(chart), "{what} and the chart");
    for object in built {
        if let Some(rendered) = find(chart, &describe(object))
            && let Some(d) = first_difference(&without_helm_labels(rendered), object, "")
        {
            panic!("{}: {d} (left: the chart, right: {what})", describe(object));
        }
    }
}

/// What the overlays add by hand, the chart does its own way: the
/// cert-manager overlay's patch is the chart's `certificates.source:
/// cert-manager`, the self-managed overlay's caBundle is the chart's
/// `certificates.external.caBundle`, and its Secret is the one the chart
/// leaves to the user.
#[test]
#[ignore = "needs helm (FG_HELM) and kubectl (FG_KUBECTL): see .ci/run"]
fn each_overlay_installs_what_the_chart_installs_for_its_certificates() {
    let (helm, kubectl) = (helm(), kubectl());
    let off = ["--set", "policyCheck.enabled=false"];

    let mut args = off.to_vec();
    args.extend(["--set", "certificates.source=cert-manager"]);
    let chart = template(&helm, &args);
    check_all(&chart);
    let built = kustomize(&kubectl, &manifests().join("overlays/cert-manager"));
    assert_same_objects(&chart, &built, &[], "manifests/overlays/cert-manager");

    let copy = copy_manifests();
    let overlay = copy.path().join("manifests/overlays/self-managed");
    let bundle = write_certs(&overlay);
    let ca_bundle = format!(
        "certificates.external.caBundle={}",
        finalizer_guard::pki::certificates::ca_bundle(&bundle.ca_cert_pem)
    );
    let mut args = off.to_vec();
    args.extend(["--set", "certificates.source=external", "--set", &ca_bundle]);
    let chart = template(&helm, &args);
    check_all(&chart);
    assert!(
        chart.iter().all(|o| text(o, "/kind") != "Secret"),
        "external: the chart makes no Secret"
    );
    let built = kustomize(&kubectl, &overlay);
    assert_same_objects(
        &chart,
        &built,
        &[&format!("Secret {NAMESPACE}/{TLS_SECRET}")],
        "manifests/overlays/self-managed",
    );
}

/// A copy of the chart, in `DIR/finalizer-guard`, to render with changes.
pub(crate) fn copy_chart() -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let chart_copy = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(chart_copy.join("templates")).unwrap();
    for entry in ["Chart.yaml", "values.yaml", "values.schema.json"] {
        std::fs::copy(chart().join(entry), chart_copy.join(entry)).unwrap();
    }
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(
            &path,
            chart_copy.join("templates").join(path.file_name().unwrap()),
        )
        .unwrap();
    }
    copy
}
