//! `approve` and `unstick` against objects whose names are hostile: names
//! that Kubernetes stores (a Role's name is validated only as a path
//! segment) but that hold `#`, `?`, shell syntax, newlines and escape
//! sequences. An API server stand-in records every request as it was sent.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use common::assert::{Stream, assert_printable, assert_prints_on};
use serde_json::{Value, json};

const NS: &str = "team";
const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
const PWNED: &str = "x;touch${IFS}fg-pwned;#";
const NEWLINE: &str = "bad\nname";
const ESCAPES: &str = "\u{1b}[2J\u{1b}]0;owned\u{7}esc";
/// Answered with a 500: one object that cannot be read.
const BROKEN: &str = "broken";
/// Answered with another object (`victim`): an API server, or a path, that
/// does not name what was asked.
const SWAPPED: &str = "swapped";

/// Every request the stand-in was sent: `METHOD PATH?QUERY`, as it came.
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<String>>>);

impl Recorded {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn writes(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|r| !r.starts_with("GET ") && !r.contains("selfsubjectreviews"))
            .collect()
    }
}

fn role(name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{}", name.len()),
            "resourceVersion": "7",
            "deletionTimestamp": "2026-11-21T07:00:00Z",
            "finalizers": ["example.com/keep"],
        },
        "rules": [],
    })
}

fn roles() -> BTreeMap<String, Value> {
    ["victim", PWNED, NEWLINE, ESCAPES, BROKEN, SWAPPED]
        .into_iter()
        .map(|n| (n.to_string(), role(n)))
        .collect()
}

fn discovery(group: &str, resources: Value) -> Value {
    json!({
        "apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList", "metadata": {},
        "items": [{"metadata": {"name": group}, "versions": [{"version": "v1", "resources": resources}]}],
    })
}

type Answer = (StatusCode, [(&'static str, &'static str); 1], String);

async fn answer(State(recorded): State<Recorded>, request: Request) -> Answer {
    let uri = request.uri();
    let path = uri.path().to_string();
    recorded.0.lock().unwrap().push(format!(
        "{} {}",
        request.method(),
        uri.path_and_query().map_or("", |p| p.as_str())
    ));
    let json = |code: StatusCode, body: Value| -> Answer {
        (
            code,
            [("content-type", "application/json")],
            body.to_string(),
        )
    };
    let ok = |body: Value| json(StatusCode::OK, body);
    let status = |code: StatusCode, reason: &str| {
        json(
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": reason, "code": code.as_u16()}),
        )
    };
    let method = request.method().clone();
    if path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
        return json(
            StatusCode::CREATED,
            json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {},
                "status": {"userInfo": {"username": "carol", "groups": ["sre-oncall"]}},
            }),
        );
    }
    if path == "/apis" {
        return ok(discovery(
            "rbac.authorization.k8s.io",
            json!([{
                "resource": "roles", "scope": "Namespaced", "singularResource": "role",
                "responseKind": {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role"},
                "verbs": ["get", "list", "patch", "delete", "watch"],
            }]),
        ));
    }
    if path == "/api" {
        return ok(discovery(
            "",
            json!([{
                "resource": "namespaces", "scope": "Cluster", "singularResource": "namespace",
                "responseKind": {"group": "", "version": "v1", "kind": "Namespace"},
                "verbs": ["get", "list", "patch", "delete", "watch"],
                "subresources": [{"subresource": "finalize", "verbs": ["update"],
                    "responseKind": {"group": "", "version": "v1", "kind": "Namespace"}}],
            }]),
        ));
    }
    if path == "/api/v1/namespaces/team" {
        return ok(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NS, "uid": "uid-ns", "resourceVersion": "3", "deletionTimestamp": "2026-11-21T07:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Terminating"},
        }));
    }
    if path == ROLES && method == Method::GET {
        let items: Vec<Value> = roles().into_values().collect();
        return ok(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleList", "metadata": {}, "items": items}),
        );
    }
    if let Some(segment) = path.strip_prefix(&format!("{ROLES}/")) {
        // kube-apiserver decodes the path segment.
        let name = percent_encoding::percent_decode_str(segment)
            .decode_utf8()
            .unwrap()
            .into_owned();
        let roles = roles();
        return match (method, name.as_str()) {
            (Method::GET, BROKEN) => status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            (Method::GET, SWAPPED) => ok(roles["victim"].clone()),
            (_, name) => match roles.get(name) {
                Some(role) => ok(role.clone()),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
        };
    }
    // Nothing else is there: no webhook installed, no leases, no nodes.
    // A collection (`R`, `namespaces/NS/R` after the group and version) is an empty list.
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let group_version = if segments.first() == Some(&"api") {
        2
    } else {
        3
    };
    let collection = segments.len() > group_version && (segments.len() - group_version) % 2 == 1;
    if method == Method::GET && collection {
        return ok(json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}));
    }
    status(StatusCode::NOT_FOUND, "NotFound")
}

/// The stand-in, and a kubeconfig that points at it.
async fn stand_in(dir: &Path) -> (Recorded, PathBuf) {
    let recorded = Recorded::default();
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(recorded.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u, namespace: {NS}}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    (recorded, kubeconfig)
}

async fn run(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("FINALIZER_GUARD_POLICY")
        .env("NO_COLOR", "1");
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_holding_a_fragment_never_reaches_another_object() {
    let dir = tempfile::tempdir().unwrap();
    let (recorded, kubeconfig) = stand_in(dir.path()).await;
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "mode: enforce\noverride:\n  approval:\n    groups: [sre-oncall]\n    maxAge: 2h\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();

    // approve: the decoy is not there, and victim is neither read nor written.
    let o = run(
        &kubeconfig,
        &[
            "approve",
            "role/victim#decoy",
            "-n",
            NS,
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--for",
            "1h",
            "--policy",
            policy,
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("role/victim#decoy not found in namespace team"),
        "{}",
        text(&o)
    );
    assert!(recorded.writes().is_empty(), "{:#?}", recorded.all());
    let asked = recorded.all();
    assert!(
        asked
            .iter()
            .any(|r| r == &format!("GET {ROLES}/victim%23decoy")),
        "{asked:#?}"
    );
    assert!(
        !asked
            .iter()
            .any(|r| r.starts_with(&format!("GET {ROLES}/victim")) && !r.contains("%23")),
        "{asked:#?}"
    );

    // unstick --reason: the same.
    let o = release(&kubeconfig, "role/victim#decoy").await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("role/victim#decoy not found"),
        "{}",
        text(&o)
    );
    assert!(recorded.writes().is_empty(), "{:#?}", recorded.all());

    // A `?` ends no path either.
    let o = run(&kubeconfig, &["unstick", "role/victim?x=1", "-n", NS]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        recorded
            .all()
            .iter()
            .any(|r| r == &format!("GET {ROLES}/victim%3Fx%3D1")),
        "{:#?}",
        recorded.all()
    );

    // An answer that is not the object named is refused, and nothing written.
    let o = release(&kubeconfig, "role/swapped").await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("the API server answered with another object (\"victim\" in namespace \"team\") than the one asked for (\"swapped\" in namespace \"team\")"),
        "{}",
        text(&o)
    );
    assert!(recorded.writes().is_empty(), "{:#?}", recorded.all());

    // The object named is written, at its encoded path.
    let o = release(&kubeconfig, &format!("role/{PWNED}")).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let writes = recorded.writes();
    assert!(!writes.is_empty(), "{:#?}", recorded.all());
    for w in &writes {
        assert!(
            w.starts_with(&format!(
                "PATCH {ROLES}/x%3Btouch%24%7BIFS%7Dfg-pwned%3B%23?"
            )),
            "{writes:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_name_never_fails_a_listing_and_none_reaches_the_terminal_raw() {
    let dir = tempfile::tempdir().unwrap();
    let (recorded, kubeconfig) = stand_in(dir.path()).await;

    let o = run(&kubeconfig, &["unstick", "roles", "-n", NS]).await;
    assert_printable(&o);
    let out = text(&o);
    // Each of the others is explained; the two that cannot be read as
    // named are an error line each, and the run exits 1, not 2.
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_prints_on(
        &o,
        Stream::Either,
        &[
            "role.rbac.authorization.k8s.io/victim -n team: Terminating for",
            "role.rbac.authorization.k8s.io/x;touch${IFS}fg-pwned;# -n team: Terminating for",
            "role.rbac.authorization.k8s.io/bad\\u{a}name -n team: Terminating for",
            "role.rbac.authorization.k8s.io/\\u{1b}[2J\\u{1b}]0;owned\\u{7}esc -n team: Terminating for",
            "role.rbac.authorization.k8s.io/broken -n team error: cannot be read: InternalError (500)",
            "role.rbac.authorization.k8s.io/swapped -n team error: cannot be read: the API server answered with another object",
            "4 stuck object(s)",
        ],
    );
    assert!(
        recorded
            .all()
            .iter()
            .any(|r| r == &format!("GET {ROLES}/bad%0Aname")),
        "{:#?}",
        recorded.all()
    );

    // -o json keeps the names as they are, and says which could not be read.
    let o = run(&kubeconfig, &["unstick", "roles", "-n", NS, "-o", "json"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&NEWLINE) && names.contains(&ESCAPES),
        "{names:?}"
    );
    assert_eq!(report["unread"].as_array().unwrap().len(), 2, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_printed_to_paste_run_nothing_and_name_exactly_their_object() {
    let dir = tempfile::tempdir().unwrap();
    let (_recorded, kubeconfig) = stand_in(dir.path()).await;

    let o = run(&kubeconfig, &["unstick", "namespace/team"]).await;
    assert_printable(&o);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("each released by its own command:"), "{out}");
    let commands: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(": finalizer-guard unstick ").map(|(_, c)| c))
        .collect();
    assert_eq!(commands.len(), roles().len(), "{out}");
    assert!(
        out.contains(
            "finalizer-guard unstick 'roles.rbac.authorization.k8s.io/x;touch${IFS}fg-pwned;#' -n team --reason REASON --detail TEXT"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "finalizer-guard unstick $'roles.rbac.authorization.k8s.io/bad\\nname' -n team"
        ),
        "{out}"
    );
    // Pasted into a shell, each command is these words exactly, and runs nothing.
    let shell = dir.path().join("shell");
    std::fs::create_dir(&shell).unwrap();
    for command in &commands {
        let pasted = Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\n' {command}"))
            .current_dir(&shell)
            .output()
            .unwrap();
        assert!(pasted.status.success(), "{command}: {pasted:?}");
        let words = String::from_utf8(pasted.stdout).unwrap();
        let object = words.lines().next().unwrap_or_default().to_string();
        let name = object
            .strip_prefix("roles.rbac.authorization.k8s.io/")
            .unwrap_or_else(|| panic!("{command}: {words:?}"));
        // A name with a newline is two lines of printf's output: read it whole.
        let whole = if name == "bad" {
            "bad\nname".to_string()
        } else {
            name.to_string()
        };
        assert!(roles().contains_key(&whole), "{command}: {words:?}");
        assert!(
            words.ends_with("-n\nteam\n--reason\nREASON\n--detail\nTEXT\n"),
            "{command}: {words:?}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&shell).unwrap().count(),
        0,
        "a pasted command ran something"
    );
}

/// `unstick NAME -n NS --reason controller-uninstalled --detail INC-1`.
async fn release(kubeconfig: &Path, name: &str) -> std::process::Output {
    let args = [
        "unstick",
        name,
        "-n",
        NS,
        "--reason",
        "controller-uninstalled",
    ];
    run(kubeconfig, &[&args[..], &["--detail", "INC-1"]].concat()).await
}
