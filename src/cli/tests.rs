use super::*;

#[test]
fn cli_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn serve_and_watch_take_one_cluster_name_flag() {
    use clap::Parser;
    let named = |args: &[&str]| -> Option<String> {
        match Cli::try_parse_from(args).map(|cli| cli.command) {
            Ok(Command::Serve(args)) => args.into_config().cluster_name,
            Ok(Command::Watch(args)) => args.into_config().cluster_name,
            Ok(_) => panic!("{args:?}"),
            Err(e) => Some(format!("error: {e}")),
        }
    };
    for command in ["serve", "watch"] {
        assert_eq!(
            named(&["finalizer-guard", command, "--cluster-name", "prod-eu-1"]).as_deref(),
            Some("prod-eu-1")
        );
        assert_eq!(named(&["finalizer-guard", command]), None);
        let refused = named(&["finalizer-guard", command, "--cluster-name", "prod eu"]).unwrap();
        assert!(
            refused.starts_with("error: ") && refused.contains("is not a cluster name"),
            "{refused}"
        );
    }
}
