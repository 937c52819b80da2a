//! Hostile input: unreadable files, FIFOs and devices, symlink loops, alias
//! bombs and patches past their work budget, each refused in bounded time
//! and memory.

use super::*;

/// 2 means the input could not be read, for every command that reads files.
#[test]
fn an_unreadable_input_exits_2_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.json");
    let gone_yaml = dir.path().join("gone.yaml");
    let gone = gone.to_str().unwrap();
    let gone_yaml = gone_yaml.to_str().unwrap();
    for args in [
        vec!["check", gone],
        vec![
            "check",
            "--policy",
            gone_yaml,
            "examples/reviews/pod-strip-finalizers.json",
        ],
        vec!["test", gone],
        vec!["test", gone_yaml],
        vec!["test", "examples/suite.yaml", gone],
        vec!["test", "--policy", gone_yaml, "examples/suite.yaml"],
        vec!["policy", "validate", gone_yaml],
        vec!["policy", "suggest", gone],
        vec!["doctor", "--policy", gone_yaml],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(
            format!("{}{}", stdout(&o), stderr(&o)).contains("gone."),
            "{args:?} names the file: {o:?}"
        );
    }
    // A case that decides otherwise than expected is a failure, not an input error.
    let o = run(&["test", "examples/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// The binary, killed and failed if it has not finished within 60 s: a
/// command that would hang fails its test instead of stalling the run.
fn run_within(args: &[&str]) -> Output {
    let mut child = bin()
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if !exits_within(&mut child, Duration::from_secs(60)) {
        child.kill().unwrap();
        let o = child.wait_with_output().unwrap();
        panic!("{args:?} did not finish within 60 s: {o:?}");
    }
    child.wait_with_output().unwrap()
}

/// A FIFO at `path`: opening it to read waits for a writer that never comes.
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

#[cfg(unix)]
#[test]
fn symlink_loops_in_a_folder_are_read_once_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::copy(
        "tests/fixtures/cases/pod-create-with-finalizers-allowed.json",
        root.join("case.json"),
    )
    .unwrap();
    // Each leads back to the folder: followed blindly, 2^40 paths and more.
    std::os::unix::fs::symlink(".", root.join("a.json")).unwrap();
    std::os::unix::fs::symlink(".", root.join("b.json")).unwrap();
    let root_text = root.to_str().unwrap();
    let o = run_within(&["test", root_text]);
    let out = stdout(&o);
    let again = format!(
        ": the folder {root_text} again (a symlink loop, or a second link to it): not read twice"
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("ERROR {root_text}/a.json{again}"),
            format!("ERROR {root_text}/b.json{again}"),
            format!("ok   {root_text}/case.json: not-judged"),
            "1 passed, 0 failed, 2 unreadable".to_string(),
        ],
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");

    // `policy suggest` walks folders too: a note, and the evidence read once.
    std::fs::remove_file(root.join("case.json")).unwrap();
    std::fs::write(
        root.join("audit.log"),
        webhook_record(
            "system:serviceaccount:ops:cleanup",
            &[],
            "team-a",
            &["example.com/cleanup"],
        ),
    )
    .unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
    let o = run_within(&["policy", "suggest", root_text]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = stderr(&o);
    for link in ["a.json", "b.json", "sub/up"] {
        assert!(
            err.contains(&format!("note: {root_text}/{link}{again}\n")),
            "{link}: {err}"
        );
    }
    assert!(stdout(&o).contains("ops:cleanup"), "{o:?}");
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.json");
    mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    let o = run_within(&["check", fifo, "/dev/zero"]);
    assert_eq!(
        stdout(&o),
        format!(
            "{fifo}: error: not a regular file (a FIFO)\n/dev/zero: error: not a regular file (a character device)\n"
        ),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));

    // In a folder `test` runs, a suite's review, and given to `test` itself.
    let folder = dir.path().to_str().unwrap();
    let o = run_within(&["test", folder]);
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {fifo}: cannot read: not a regular file (a FIFO)\n0 passed, 0 failed, 1 unreadable\n"
        ),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));
    let suite = dir.path().join("suite.yaml");
    std::fs::write(
        &suite,
        "cases:\n- name: a FIFO\n  review: x.json\n  expect: denied\n- name: zeros\n  review: /dev/zero\n  expect: denied\n",
    )
    .unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "ERROR a FIFO: cannot read {fifo}: not a regular file (a FIFO)\n"
        )),
        "{out}"
    );
    // A device is outside the suite's folder: refused before it is opened.
    assert!(
        out.contains(
            "ERROR zeros: review /dev/zero: a suite names its files by paths relative to its folder, without `..`\n"
        ),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(2));
    // A suite's policy file is read the same way.
    std::fs::write(&suite, "policy: x.json\ncases: []\n").unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    assert!(stdout(&o).contains("not a regular file (a FIFO)"), "{o:?}");
    assert_eq!(o.status.code(), Some(2));

    let o = run_within(&["policy", "suggest", folder]);
    assert!(
        stderr(&o).contains(&format!("error: {fifo}: not a regular file (a FIFO)")),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));
}

/// The binary with at most `mib` MiB of address space (`ulimit -v`): an
/// input that makes it allocate without bound aborts it (signal 6)
/// instead of taking the machine's memory.
#[cfg(unix)]
fn run_capped(mib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mib * 1024))
        .arg(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .output()
        .unwrap()
}

/// A policy or suite of 20 KB whose anchors, repeated by alias, expand to
/// millions of nodes is refused before it is built, naming the limit:
/// with 512 MiB of address space, `policy validate` and `test` of them
/// aborted, out of memory, before. Anchors reused as a suite reuses an
/// object still read as if written out.
#[cfg(unix)]
#[test]
fn an_alias_bomb_is_refused_before_it_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_capped(512, &["policy", "validate", "examples/policy.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // One anchored list of 4,000 items, repeated 4,000 times: 16 million nodes.
    let policy = dir.path().join("policy.yaml");
    let list = vec!["x"; 4000].join(",");
    let aliases = vec!["*a"; 4000].join(",");
    std::fs::write(&policy, format!("presets: [&a [{list}], {aliases}]\n")).unwrap();
    assert!(std::fs::metadata(&policy).unwrap().len() < 21_000);
    let o = run_capped(512, &["policy", "validate", policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "{}: expands to more than 100000 nodes by line 1 column 8086 (an alias counts as all of the node it repeats); a YAML document may expand to at most 100000 nodes\n",
            policy.display()
        )
    );

    // An object of 200 lists of 1,000 items, in each of 200 cases: 40 million nodes.
    let suite = dir.path().join("suite.yaml");
    let lists = (1..200).map(|i| format!("l{i}: *l")).collect::<Vec<_>>();
    let mut text = format!(
        "cases:\n  - object: &o {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b], spec: {{l0: &l [{}], {}}}}}\n    requester: {{user: jane}}\n    finalizersAfter: []\n    expect: denied\n",
        vec!["0"; 1000].join(","),
        lists.join(", ")
    );
    let case = "  - {object: *o, requester: {user: jane}, finalizersAfter: [], expect: denied}\n";
    text.push_str(&case.repeat(200));
    std::fs::write(&suite, &text).unwrap();
    assert!(text.len() < 21_000, "{}", text.len());
    let o = run_capped(512, &["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {}: not a suite file: expands to more than 1000000 nodes by line 9 column 14 (an alias counts as all of the node it repeats); a YAML document may expand to at most 1000000 nodes\n0 passed, 0 failed, 1 unreadable\n",
            suite.display()
        )
    );

    // The same object, reused by a few cases and its policy's rules by
    // alias too: each case decided.
    let suite = dir.path().join("reused.yaml");
    std::fs::write(
        dir.path().join("policy.yaml"),
        "rules:\n  - finalizers: [example.com/a]\n    groups: &oncall [oncall]\n  - finalizers: [example.com/b]\n    groups: *oncall\n",
    )
    .unwrap();
    std::fs::write(
        &suite,
        "policy: policy.yaml\ncases:\n  - object: &o {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/a, example.com/b]}\n    requester: &jane {user: jane}\n    finalizersAfter: []\n    expect: denied\n  - {object: *o, requester: {user: joe, groups: [oncall]}, finalizersAfter: [], expect: allowed}\n  - {object: *o, requester: *jane, finalizersAfter: [example.com/a, example.com/b], expect: allowed}\n",
    )
    .unwrap();
    let o = run_capped(512, &["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).ends_with("3 passed, 0 failed\n"), "{o:?}");
}

/// A short case whose JSON patch would take quadratic work (each of 2,000
/// insertions at the front of a 1,000-item array shifts it) is refused,
/// naming the budget, before the work is done; it ran through before.
#[test]
fn a_json_patch_past_its_work_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    let ops = vec!["{op: add, path: /spec/items/0, value: 1}"; 2000].join(", ");
    std::fs::write(
        &suite,
        format!(
            "cases:\n  - object: {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b], spec: {{items: [{}]}}}}\n    requester: {{user: jane}}\n    jsonPatch: [{ops}]\n    expect: allowed\n",
            vec!["0"; 1000].join(",")
        ),
    )
    .unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {}: cases[0]: cases[0].jsonPatch[730]: the patch takes more than 1000000 units of work (nodes read, copied or visited, array items shifted), the most a case's patch may take: give fewer operations, or a smaller object\n0 passed, 0 failed, 1 unreadable\n",
            suite.display()
        )
    );
}

/// Every other command that reads YAML from outside refuses the bomb as
/// `policy validate` does: `policy suggest --merge`'s policy, the exports
/// `policy validate --vap` and `--static` compare with the policy.
#[cfg(unix)]
#[test]
fn every_yaml_reader_refuses_an_alias_bomb() {
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.yaml");
    let list = vec!["x"; 4000].join(",");
    let aliases = vec!["*a"; 4000].join(",");
    std::fs::write(&bomb, format!("presets: [&a [{list}], {aliases}]\n")).unwrap();
    let bomb = bomb.to_str().unwrap();
    let refusal = "expands to more than 100000 nodes by line 1 column 8086 (an alias counts as all of the node it repeats); a YAML document may expand to at most 100000 nodes";

    let o = run_capped(
        512,
        &["policy", "suggest", "--merge", bomb, "evidence.json"],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(stderr(&o), format!("error: policy {bomb}: {refusal}\n"));

    let policy = "examples/policy.yaml";
    let o = run_capped(512, &["policy", "validate", "--vap", bomb, policy]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains(&format!("not YAML: {refusal}; export it again")),
        "{o:?}"
    );

    let exported = dir.path().join("static");
    let exported = exported.to_str().unwrap();
    let o = run(&[
        "policy",
        "export",
        "--static",
        exported,
        "--operator",
        "admin",
        policy,
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    std::fs::copy(bomb, dir.path().join("static/admission-config.yaml")).unwrap();
    let o = run_capped(
        512,
        &[
            "policy",
            "validate",
            "--static",
            exported,
            "--operator",
            "admin",
            policy,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains(&format!(
            "admission-config.yaml: not YAML: {refusal}; export it again"
        )),
        "{o:?}"
    );
}
