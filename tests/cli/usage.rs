//! What every command shares: help and the command pages, `--version`,
//! flags' values and their errors, JSON reports, a closed standard output.

use super::*;

/// `-o json` prints each command's report as JSON on standard output, and
/// nothing else there; `check --json` (hidden) is `check -o json`.
#[test]
fn every_report_has_a_json_form() {
    let json = |args: &[&str]| -> (Option<i32>, serde_json::Value, String) {
        let o = run(args);
        let doc = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {}", stdout(&o)));
        (o.status.code(), doc, stderr(&o))
    };
    let review = "examples/reviews/pod-strip-finalizers.json";
    let (code, line, _) = json(&["check", "-o", "json", review]);
    assert_eq!(code, Some(1));
    assert_eq!(line["file"], review);
    assert_eq!(line["decision"], "denied");
    assert_eq!(
        run(&["check", "--json", review]).stdout,
        run(&["check", "-o", "json", review]).stdout
    );
    // A line per file, whatever the format.
    let o = run(&["check", "-o", "json", review, review]);
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    assert_eq!(
        stdout(&run(&["check", "-o", "text", review])),
        stdout(&run(&["check", review]))
    );

    let (code, report, _) = json(&["test", "-o", "json", "examples/suite.yaml"]);
    assert_eq!(code, Some(0));
    assert_eq!(report["failed"], 0, "{report:#}");
    assert!(report["passed"].as_u64().unwrap() > 0, "{report:#}");
    assert!(report["cases"][0]["name"].is_string(), "{report:#}");

    let (code, report, _) = json(&[
        "policy",
        "validate",
        "-o",
        "json",
        "tests/fixtures/policy.yaml",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(report["valid"], true, "{report:#}");
    assert_eq!(report["policy"]["mode"], "enforce", "{report:#}");
    let (_dir, bad) = policy_file("rules:\n  - finalizers: [\"a*b\"]\n");
    let (code, report, _) = json(&["policy", "validate", "-o", "json", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert_eq!(report["valid"], false, "{report:#}");
    assert!(
        report["errors"][0].as_str().unwrap().contains("a*b"),
        "{report:#}"
    );
    let (_dir, warn) = policy_file("mode: warn\nbuiltinControllers: false\n");
    let (code, report, err) = json(&["policy", "validate", "-o", "json", warn.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(
        !report["wouldBlock"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert!(
        err.contains("served in warn mode, refused in enforce mode"),
        "{err}"
    );

    let (_dir, blocks) = policy_file("builtinControllers: false\n");
    let (code, report, _) = json(&["doctor", "-o", "json", "--policy", blocks.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let blocked = report["blocked"].as_array().unwrap();
    assert!(
        blocked
            .iter()
            .any(|b| b["controller"] == "namespace" && b["verdict"] == "denied"),
        "{report:#}"
    );
}

/// A duration a person types wrong is answered in the flag's own terms.
#[test]
fn approve_for_says_which_durations_it_takes() {
    for typed in ["1y", "2d", "soon"] {
        let o = run(&[
            "approve",
            "pod/web-0",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--for",
            typed,
        ]);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let err = stderr(&o);
        assert!(err.contains("--for <DURATION>"), "{err}");
        assert!(
            err.contains("ms, s, m or h") && err.contains("30m"),
            "{err}"
        );
        assert!(
            !err.contains("jiff") && !err.contains("Span"),
            "no library talk: {err}"
        );
    }
}

/// The long flags one `--help` lists, and the subcommands it names.
fn help_of(command: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut args = command.to_vec();
    args.push("--help");
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    let text = stdout(&o);
    let mut flags = Vec::new();
    let mut commands = Vec::new();
    let mut section = "";
    for line in text.lines().filter(|l| !l.is_empty()) {
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        let entry = line.trim_start();
        match section {
            "Commands" => {
                let name = entry.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    commands.push(name.to_string());
                }
            }
            // `-n, --namespace <NS>` or `--node <NODE>`; descriptions and
            // possible values are indented further and start otherwise.
            "Options" if entry.starts_with('-') => {
                if let Some(flag) = entry.split([' ', ',']).find(|w| w.starts_with("--")) {
                    flags.push(flag.split(['=', '[']).next().unwrap().to_string());
                }
            }
            _ => {}
        }
    }
    (flags, commands)
}

/// Each command's page, `docs/commands/COMMAND.md` (`policy validate`:
/// `policy-validate.md`), gives every long flag its `--help` shows; a
/// command group with no flag of its own (`policy`) needs no page.
#[test]
fn command_pages_name_every_flag_the_commands_take() {
    let docs = common::repository::path("docs/commands");
    // `--flag`, not merely a longer `--flag-more`.
    let names = |page: &str, flag: &str| {
        page.match_indices(flag).any(|(at, _)| {
            page[at + flag.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
        })
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut pages = 0;
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(command) = queue.pop() {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (flags, subcommands) = help_of(&args);
        for sub in subcommands {
            let mut next = command.clone();
            next.push(sub);
            queue.push(next);
        }
        let flags: Vec<String> = flags
            .into_iter()
            .filter(|f| f != "--help" && f != "--version")
            .collect();
        if command.is_empty() || flags.is_empty() {
            continue;
        }
        let file = docs.join(format!("{}.md", command.join("-")));
        let Ok(page) = std::fs::read_to_string(&file) else {
            missing.push(format!("{}: no page {}", command.join(" "), file.display()));
            continue;
        };
        pages += 1;
        for flag in flags {
            seen += 1;
            if !names(&page, &flag) {
                missing.push(format!("{}: {flag}", command.join(" ")));
            }
        }
    }
    assert!(seen > 40, "only {seen} flags found: is --help parsed?");
    assert!(pages >= 13, "only {pages} command pages checked");
    assert!(
        missing.is_empty(),
        "docs/commands/ does not give:\n{}",
        missing.join("\n")
    );
}

/// `version` and `--version` say the version, the commit, the target and the
/// build date; `-o json` the same fields for scripts.
#[test]
fn version_names_commit_target_and_build_date() {
    let line = run(&["--version"]);
    assert!(line.status.success(), "{}", stderr(&line));
    let line = stdout(&line);
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        line.starts_with(&format!("finalizer-guard {version} (commit ")),
        "{line}"
    );
    assert!(
        line.contains(", target ") && line.contains(", built "),
        "{line}"
    );

    let text = run(&["version"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.starts_with(&format!("finalizer-guard {version}\n")),
        "{text}"
    );
    for field in ["commit:", "target:", "built:", "dependencies:"] {
        assert!(
            text.lines().any(|l| l.starts_with(field)),
            "no {field} in {text}"
        );
    }

    let json = run(&["version", "-o", "json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["version"], version);
    let commit = json["commit"].as_str().unwrap();
    // The --version line and the report say the same build.
    assert!(line.contains(&format!(
        "(commit {commit}, target {}",
        json["target"].as_str().unwrap()
    )));
    assert!(
        line.trim_end()
            .ends_with(&format!("built {})", json["build_date"].as_str().unwrap()))
    );
    assert_eq!(json["dirty"], commit.ends_with("-dirty"));
    // Built in this checkout (git is here): a commit, not `unknown`.
    if common::repository::path(".git").exists() {
        let hash = commit.trim_end_matches("-dirty");
        assert!(
            hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "{commit}"
        );
    }
}

/// Output to a reader that is gone (`| head`, `| true`) is an error the
/// command reports (exit 2), never a panic (exit 101), for every command
/// that prints what it made.
#[test]
fn a_closed_pipe_on_standard_output_is_an_error_not_a_panic() {
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("certs");
    for args in [
        vec!["policy", "export", "--vap", "examples/policy.yaml"],
        vec![
            "certs",
            "--service",
            "finalizer-guard",
            "--namespace",
            "finalizer-guard",
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = bin()
            .args(&args)
            .env_remove("FINALIZER_GUARD_POLICY")
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("Broken pipe"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

/// The test helper for command output: a failure names every missing line
/// and shows both streams and the exit code, so a failed run explains itself.
#[test]
fn assert_prints_names_every_missing_line_and_shows_the_whole_output() {
    use common::assert::{assert_prints, assert_prints_on_stderr};
    let o = run(&["version"]);
    assert_prints(&o, &["finalizer-guard ", "commit:"]);
    let failed = std::panic::catch_unwind(|| {
        assert_prints(&o, &["commit:", "no such line", "nor this one"]);
    })
    .expect_err("lines missing from standard output fail the test");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert_contains_all(
        "the failure message",
        message,
        &[
            "standard output lacks 2 of 3 expected:",
            "  missing: \"no such line\"\n  missing: \"nor this one\"\n",
            "exit code: 0",
            "--- standard output ---\nfinalizer-guard ",
            "--- standard error ---",
        ],
    );
    assert!(!message.contains("missing: \"commit:\""), "{message}");
    assert!(
        std::panic::catch_unwind(|| assert_prints_on_stderr(&o, &["commit:"])).is_err(),
        "version prints on standard output, not error"
    );
}

#[test]
fn a_bad_flag_value_is_repeated_escaped_and_cut_never_raw() {
    let long = "x".repeat(100_000);
    for (args, says) in [
        (
            vec!["serve", "--cluster-name", "prod\n\u{1b}[2Jforged\u{202e}"],
            "is not a cluster name",
        ),
        (
            vec!["watch", "--cluster-name", long.as_str()],
            "is not a cluster name",
        ),
        (
            vec!["serve", "--shutdown-delay", "5\u{1b}[31ms\nforged"],
            "is not a duration",
        ),
        (
            vec!["serve", "--certificates-secret", "a\nb/\u{1b}c"],
            "is not NAMESPACE/NAME",
        ),
        (vec!["certs", "--dns", "a b"], "\"a b\" is not a DNS name"),
        (
            vec!["certs", "--dns", "web..example.com"],
            "is not a DNS name",
        ),
        (vec!["certs", "--dns", "*"], "is not a DNS name"),
        (
            vec!["certs", "--service", "Web Hook"],
            "\"Web Hook\" is not a Service name",
        ),
        (
            vec!["certs", "--namespace", "ops.prod"],
            "is not a namespace name",
        ),
        (
            vec!["serve", "--certificate-dns", "ok.example.com,-bad"],
            "\"-bad\" is not a DNS name",
        ),
        (
            vec!["serve", "--service", "fg_webhook\u{1b}[2J"],
            "is not a Service name",
        ),
        (
            vec!["certs", "--service", "123"],
            "\"123\" is not a Service name",
        ),
        (
            vec!["certs", "--dns", "10.0.0.1"],
            "\"10.0.0.1\" is an IP address",
        ),
        (
            vec!["serve", "--certificates-secret", "../secrets"],
            "is not NAMESPACE/NAME",
        ),
        (
            vec!["serve", "--certificates-secret", "ns/.."],
            "is not NAMESPACE/NAME",
        ),
        (
            vec!["serve", "--certificates-secret", "a.b/certs"],
            "is not NAMESPACE/NAME",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.contains(says), "{err}");
        assert!(!err.contains(['\u{1b}', '\u{202e}']), "{err:?}");
        let first = err.lines().next().unwrap();
        assert!(first.starts_with("error: invalid value for '--"), "{first}");
        assert!(first.contains(says), "the value on one line: {err:?}");
        assert!(err.len() < 1024, "{} bytes: {err:.200}", err.len());
        assert!(err.contains("--help"), "{err}");
    }
}
