//! Tests of the merge: each source's precedence, each section reaching its owner from the file's table or
//! top-level keys, and the owners' refusals coming out with the config's own error wording. The rules
//! themselves are tested beside each section's settings.rs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use veil_admin::settings::Tokenless;
use veil_azure::settings::{AuthMode as AzureAuthMode, EntraSetting};
use veil_sqs::settings::AuthMode as SqsAuthMode;

use super::*;

fn resolve_text(text: &str) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("veil.toml");
    std::fs::write(&path, text).unwrap();
    Settings::resolve(ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

/// The message `veil serve` prints for a refused configuration.
fn refusal(text: &str) -> String {
    match resolve_text(text) {
        Ok(settings) => panic!("expected a refusal, got {settings:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn an_admin_endpoint_beyond_loopback_needs_a_token_from_the_flag_or_the_file() {
    let refused = refusal("admin_listen = \"0.0.0.0:9325\"\n");
    assert!(
        refused.starts_with("invalid setting: the admin endpoint would listen on 0.0.0.0:9325"),
        "{refused}"
    );
    assert!(refused.contains("--admin-token"), "{refused}");
    let with_token =
        resolve_text("admin_listen = \"0.0.0.0:9325\"\nadmin_token = \"t\"\n").unwrap();
    assert_eq!(with_token.admin.token.as_deref(), Some("t"));
    let empty_token = refusal("admin_listen = \"0.0.0.0:9325\"\nadmin_token = \"\"\n");
    assert!(
        empty_token.contains("--admin-token"),
        "an empty token is no token"
    );
    let flag = Settings::resolve(ServeArgs {
        admin_listen: Some("0.0.0.0:9325".parse().unwrap()),
        admin_token: Some("t".into()),
        ..ServeArgs::default()
    })
    .unwrap();
    assert!(!flag.admin.guard().loopback_peers_only);
}

#[test]
fn probes_only_lets_a_tokenless_admin_endpoint_listen_beyond_loopback_for_loopback_peers() {
    let settings = resolve_text(
        "admin_listen = \"0.0.0.0:9325\"\nadmin_tokenless = \"probes-only\"\nadmin_allowed_hosts = [\"veil\"]\n",
    )
    .unwrap();
    assert_eq!(settings.admin.tokenless, Tokenless::ProbesOnly);
    let guard = settings.admin.guard();
    assert!(guard.loopback_peers_only);
    assert_eq!(guard.allowed_hosts, ["veil"]);
}

#[test]
fn an_advertised_sqs_url_from_the_file_is_checked_by_the_sqs_settings() {
    let settings = resolve_text("sqs_advertised_url = \"http://veil:9324/\"\n").unwrap();
    assert_eq!(
        settings.sqs.advertised_origin().unwrap().as_deref(),
        Some("http://veil:9324")
    );
    let refused = refusal("sqs_advertised_url = \"http://veil/queues\"\n");
    assert_eq!(
        refused,
        "invalid setting: sqs_advertised_url must be http://host[:port] or https://host[:port] without a \
         path, got \"http://veil/queues\""
    );
}

#[test]
fn kubemq_jwt_and_rules_come_from_the_kubemq_table() {
    let settings = resolve_text(
        "[kubemq]\nauth_jwt_key = \"s\"\nauth_jwt_signature_type = \"HS256\"\n\
         [[kubemq.rules]]\nclient_id = \"a\"\nchannel = \"b\"\nqueues = true\nwrite = true\n\
         [[kubemq.tokens]]\ntoken = \"t\"\ngrants = [{ queues = \"q*\", permissions = [\"send\"] }]\n",
    )
    .unwrap();
    let auth = settings.kubemq.auth().unwrap();
    assert!(auth.jwt.is_some() && auth.policy.is_some());
    assert_eq!(auth.static_tokens.len(), 1);
    let refused = refusal("[kubemq]\nauth_jwt_key = \"s\"\n");
    assert_eq!(
        refused,
        "invalid setting: kubemq auth_jwt_signature_type is missing (HS256, RS256, ES256, ...)"
    );
}

#[test]
fn a_kubemq_key_file_that_cannot_be_read_is_a_read_error() {
    let refused = refusal(
        "[kubemq]\nauth_jwt_key_file = \"/nonexistent/key.pem\"\nauth_jwt_signature_type = \"RS256\"\n",
    );
    assert!(
        refused.starts_with("cannot read config file /nonexistent/key.pem: "),
        "{refused}"
    );
}

#[test]
fn kubemq_tokens_and_visibility_default_come_from_the_kubemq_table() {
    let settings = resolve_text(
        "[kubemq]\nlisten = \"127.0.0.1:20050\"\nauth_tokens = [\"t1\", \"t2\"]\ndefault_visibility_seconds = 5\n",
    )
    .unwrap();
    assert_eq!(settings.kubemq.listen.to_string(), "127.0.0.1:20050");
    assert_eq!(
        settings.kubemq.auth_tokens,
        vec!["t1".to_string(), "t2".to_string()]
    );
    let queues = settings.kubemq.queue_settings().unwrap();
    assert_eq!(queues.default_visibility_s, 5);
    assert_eq!(queues.max_visibility_s, 43_200);
}

#[test]
fn a_kubemq_visibility_default_above_the_maximum_is_rejected() {
    match resolve_text("[kubemq]\ndefault_visibility_seconds = 50000\n") {
        Err(error @ ConfigError::Kubemq(_)) => {
            let message = error.to_string();
            assert!(
                message.starts_with("invalid setting: kubemq default_visibility_seconds"),
                "{message}"
            )
        }
        other => panic!("expected the visibility default to be refused, got {other:?}"),
    }
}

#[test]
fn defaults_need_no_setup() {
    let settings = Settings::resolve(ServeArgs::default()).unwrap();
    assert_eq!(settings.data_dir, PathBuf::from("./veil-data"));
    assert_eq!(settings.sqs_listen.to_string(), "127.0.0.1:9324");
    assert_eq!(settings.sqs.account_id, "000000000000");
    assert_eq!(settings.inflight_max, 120_000);
    assert_eq!(settings.durability, DurabilityMode::Durable);
    assert_eq!(settings.log_level, "info");
    assert_eq!(settings.store_cache_mib, 64);
    assert_eq!(settings.wal_segment_mib, 64);
    assert_eq!(settings.azure.listen.to_string(), "127.0.0.1:10001");
    assert_eq!(settings.azure.auth, AzureAuthMode::On);
    assert_eq!(
        settings.azure.max_dequeue_count, 0,
        "no poison policy unless asked"
    );
    assert!(settings.azure.accounts.is_empty());
    assert_eq!(settings.kubemq.listen.to_string(), "127.0.0.1:50000");
    assert!(settings.kubemq.auth_tokens.is_empty());
    assert_eq!(
        settings.kubemq.queue_settings().unwrap(),
        veil_kubemq::Settings::default()
    );
    assert_eq!(settings.admin.listen.to_string(), "127.0.0.1:9325");
    assert_eq!(settings.admin.token, None);
    assert_eq!(settings.admin.tokenless, Tokenless::Refuse);
    assert_eq!(
        settings.store,
        crate::cluster::settings::StoreSetting::Embedded
    );
}

#[test]
fn sqs_auth_is_on_with_the_dev_credential_by_default() {
    let settings = Settings::resolve(ServeArgs::default()).unwrap();
    assert_eq!(settings.sqs.auth, SqsAuthMode::On);
    let credentials = settings.sqs.credentials().unwrap();
    let keys: Vec<(&str, &str, &str)> = credentials
        .iter()
        .map(|c| {
            (
                c.access_key.as_str(),
                c.secret_key.as_str(),
                c.account_id.as_str(),
            )
        })
        .collect();
    assert_eq!(keys, [("test", "test", "000000000000")]);
}

#[test]
fn the_dev_credential_is_on_the_account_of_the_flag_or_the_file() {
    let settings = resolve_text("sqs_account_id = \"111111111111\"\n").unwrap();
    assert_eq!(
        settings.sqs.credentials().unwrap()[0].account_id,
        "111111111111"
    );
    let flag = Settings::resolve(ServeArgs {
        sqs_account_id: Some("222222222222".into()),
        ..ServeArgs::default()
    })
    .unwrap();
    assert_eq!(flag.sqs.account_id, "222222222222");
}

#[test]
fn sqs_credentials_come_from_the_sqs_table_and_the_dev_credential_can_be_turned_off() {
    let settings = resolve_text(
        "[sqs]\nauth = \"off\"\ndev_credential = false\n[[sqs.credentials]]\naccess_key = \"AK\"\n\
         secret_key = \"s\"\naccount_id = \"111111111111\"\nsession_token = \"t\"\n\
         grants = [{ queues = \"orders-*\", permissions = [\"send\"] }]\n",
    )
    .unwrap();
    assert_eq!(settings.sqs.auth, SqsAuthMode::Off);
    let credentials = settings.sqs.credentials().unwrap();
    assert_eq!(credentials.len(), 1);
    let credential = &credentials[0];
    assert_eq!(credential.session_token.as_deref(), Some("t"));
    assert_eq!(credential.grants.as_ref().map(Vec::len), Some(1));
}

#[test]
fn bad_sqs_credentials_are_rejected() {
    for (text, expected) in [
        ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"12\"\n", "12 digits"),
        ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"111111111111\"\ngrants = [{ permissions = [\"write\"] }]\n", "unknown permission"),
        ("[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"s\"\naccount_id = \"111111111111\"\n[[sqs.credentials]]\naccess_key = \"AK\"\nsecret_key = \"t\"\naccount_id = \"111111111111\"\n", "listed twice"),
        ("sqs_account_id = \"12\"\n[sqs]\ndev_credential = false\n", "sqs_account_id must be 12 digits"),
    ] {
        match resolve_text(text) {
            Err(error @ ConfigError::Sqs(_)) => {
                let message = error.to_string();
                assert!(message.starts_with("invalid setting: "), "{message}");
                assert!(message.contains(expected), "{message}");
            }
            other => panic!("expected {expected:?}, got {other:?}"),
        }
    }
}

#[test]
fn azure_entra_reads_the_jwks_file_role_assignments_and_refuses_unknown_roles() {
    use veil_azure::entra::{EntraMode, Role};
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        r#"{"keys":[{"kty":"RSA","kid":"k1","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}]}"#,
    )
    .unwrap();
    let path = dir.path().join("veil.toml");
    std::fs::write(
        &path,
        format!(
            "[azure.entra]\nmode = \"verify\"\njwks_file = {:?}\naudiences = [\"https://storage.azure.com\"]\n\
             [[azure.role_assignments]]\nprincipal = \"oid-1\"\nrole = \"Storage Queue Data Reader\"\nqueues = \"orders-*\"\n",
            jwks.display().to_string()
        ),
    )
    .unwrap();
    let args = |path: &Path, flag| ServeArgs {
        config: Some(path.to_path_buf()),
        azure_entra: flag,
        ..ServeArgs::default()
    };
    let entra = Settings::resolve(args(&path, None))
        .unwrap()
        .azure
        .entra()
        .unwrap();
    assert_eq!(entra.mode, EntraMode::Verify);
    assert_eq!(entra.keys.len(), 1);
    assert_eq!(entra.role_assignments[0].role, Role::Reader);
    assert_eq!(entra.role_assignments[0].account.as_str(), "*");
    let dev = Settings::resolve(args(&path, Some(EntraSetting::Dev))).unwrap();
    assert_eq!(
        dev.azure.entra().unwrap().mode,
        EntraMode::Dev,
        "the flag wins"
    );

    let unknown = dir.path().join("unknown.toml");
    std::fs::write(
        &unknown,
        "[[azure.role_assignments]]\nprincipal = \"x\"\nrole = \"Owner\"\n",
    )
    .unwrap();
    let refused = Settings::resolve(args(&unknown, None))
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with("invalid setting: azure role_assignments: unknown role \"Owner\""),
        "{refused}"
    );
    let no_keys = dir.path().join("nokeys.toml");
    std::fs::write(&no_keys, "[azure.entra]\nmode = \"verify\"\n").unwrap();
    let refused = Settings::resolve(args(&no_keys, None))
        .unwrap_err()
        .to_string();
    assert_eq!(
        refused,
        "invalid setting: azure entra mode verify needs [azure.entra] jwks_file"
    );
}

#[test]
fn azure_accounts_and_poison_default_come_from_the_azure_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("veil.toml");
    std::fs::write(
        &path,
        "[azure]\nlisten = \"127.0.0.1:20001\"\nauth = \"off\"\nmax_dequeue_count = 5\n\
         [[azure.accounts]]\nname = \"prodlike\"\nkey = \"c2VjcmV0\"\nnamespace = \"default\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        azure_auth: Some(AzureAuthMode::On),
        ..ServeArgs::default()
    };
    let settings = Settings::resolve(args).unwrap();
    assert_eq!(settings.azure.listen.to_string(), "127.0.0.1:20001");
    assert_eq!(
        settings.azure.auth,
        AzureAuthMode::On,
        "the flag wins over the file"
    );
    assert_eq!(settings.azure.max_dequeue_count, 5);
    assert_eq!(
        settings.azure.accounts().unwrap(),
        vec![veil_azure::AzureAccount {
            name: "prodlike".into(),
            key: b"secret".to_vec(),
            namespace: Some("default".into()),
        }]
    );
}

#[test]
fn an_azure_account_key_that_is_not_base64_is_rejected() {
    match resolve_text("[[azure.accounts]]\nname = \"acct\"\nkey = \"not base64!\"\n") {
        Err(error @ ConfigError::Azure(_)) => {
            let message = error.to_string();
            assert_eq!(
                message,
                "invalid setting: the key of Azure account \"acct\" is not base64"
            )
        }
        other => panic!("expected the key to be refused, got {other:?}"),
    }
}

#[test]
fn flags_override_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("veil.toml");
    std::fs::write(
        &path,
        "data_dir = \"/from/file\"\ninflight_max = 7\ndurability = \"relaxed\"\n\
         [azure]\nmax_dequeue_count = 3\n[kubemq]\nlisten = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        inflight_max: Some(9),
        azure_max_dequeue_count: Some(4),
        kubemq_listen: Some("127.0.0.1:2".parse::<SocketAddr>().unwrap()),
        ..ServeArgs::default()
    };
    let settings = Settings::resolve(args).unwrap();
    assert_eq!(settings.data_dir, PathBuf::from("/from/file"));
    assert_eq!(settings.inflight_max, 9);
    assert_eq!(settings.durability, DurabilityMode::Relaxed);
    assert_eq!(settings.azure.max_dequeue_count, 4);
    assert_eq!(settings.kubemq.listen.to_string(), "127.0.0.1:2");
}

#[test]
fn log_format_is_text_unless_the_flag_environment_or_file_says_json() {
    use clap::Parser;

    /// `veil serve`'s flags alone, parsed as clap parses them (flags and environment).
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    let parse = |argv: &[&str]| {
        let args = Serve::try_parse_from(argv).expect("parses").args;
        Settings::resolve(args).expect("resolves").log_format
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("veil.toml");
    std::fs::write(&path, "log_format = \"json\"\n").unwrap();
    let file = path.to_str().expect("utf-8 path");
    // The environment variable is this test's own: no other test sets or reads VEIL_LOG_FORMAT.
    std::env::remove_var("VEIL_LOG_FORMAT");
    assert_eq!(parse(&["veil"]), LogFormat::Text);
    assert_eq!(parse(&["veil", "--log-format", "json"]), LogFormat::Json);
    assert_eq!(parse(&["veil", "--config", file]), LogFormat::Json);
    assert_eq!(
        parse(&["veil", "--config", file, "--log-format", "text"]),
        LogFormat::Text,
        "the flag wins over the file"
    );
    std::env::set_var("VEIL_LOG_FORMAT", "json");
    let from_env = parse(&["veil"]);
    std::env::remove_var("VEIL_LOG_FORMAT");
    assert_eq!(from_env, LogFormat::Json);
    assert!(
        Serve::try_parse_from(["veil", "--log-format", "xml"]).is_err(),
        "only text and json"
    );
}

#[test]
fn unknown_keys_in_the_config_file_are_rejected() {
    match resolve_text("data_dri = \"typo\"\n") {
        Err(ConfigError::Parse { source, .. }) => {
            let message = source.to_string();
            assert!(message.contains("data_dri"), "{message}");
            // The parser lists the known keys in the file's order, resolved fields left out.
            assert!(
                message.contains(
                    "expected one of `data_dir`, `sqs_listen`, `sqs_account_id`, `inflight_max`"
                ),
                "{message}"
            );
            assert!(message.contains("`postgres`, `cluster`"), "{message}");
            assert!(!message.contains("`listeners`"), "{message}");
        }
        other => panic!("expected the unknown key to be refused, got {other:?}"),
    }
    for (text, key) in [
        ("[sqs]\naccount_id = \"111111111111\"\n", "account_id"),
        ("[azure]\nlisten_addr = \"127.0.0.1:1\"\n", "listen_addr"),
        ("[kubemq]\nmax_visibility = 5\n", "max_visibility"),
        ("[limits.sqs]\nmax_conections = 5\n", "max_conections"),
    ] {
        let refused = refusal(text);
        assert!(
            refused.starts_with("invalid config file ") && refused.contains(key),
            "{refused}"
        );
    }
}

#[test]
fn a_value_of_the_wrong_type_is_refused_by_the_parser() {
    for text in [
        "inflight_max = \"many\"\n",
        "sqs_listen = \"nowhere\"\n",
        "[azure]\nauth = \"maybe\"\n",
        "admin_tokenless = \"sometimes\"\n",
    ] {
        assert!(refusal(text).starts_with("invalid config file "), "{text}");
    }
}

#[test]
fn a_config_with_several_faults_is_refused_for_the_same_one_first_as_before() {
    // An SQS credential is built before the Azure poison bound is checked.
    let refused = refusal("sqs_account_id = \"12\"\n[azure]\nmax_dequeue_count = 5000\n");
    assert!(refused.contains("sqs credential \"test\""), "{refused}");
    // The server's own bounds come before KubeMQ's authentication.
    let refused = refusal("inflight_max = 0\n[kubemq]\nauth_jwt_key = \"s\"\n");
    assert_eq!(refused, "invalid setting: inflight_max must be at least 1");
    // The admin endpoint's exposure is checked last.
    let refused = refusal("admin_listen = \"0.0.0.0:1\"\nwal_segment_mib = 0\n");
    assert_eq!(refused, "invalid setting: wal_segment_mib must be 1..=1024");
}

/// Every ```toml block of the README and docs/cluster.md is a config file `veil serve` reads: no key twice,
/// none unknown, each value of its type (the README once showed a `[kubemq]` example with a key twice).
#[test]
fn every_toml_example_in_the_docs_is_a_config_file_that_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut blocks = 0;
    for doc in ["README.md", "docs/cluster.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for (index, block) in text.split("```toml\n").skip(1).enumerate() {
            let example = &block[..block.find("```").expect("a closed block")];
            if let Err(error) = toml::from_str::<Settings>(example) {
                panic!(
                    "{doc}'s toml example {} does not parse: {error}\n{example}",
                    index + 1
                );
            }
            blocks += 1;
        }
    }
    assert!(blocks >= 7, "only {blocks} examples found");
}

/// The README's `[[queues]]` example passes the checks `veil serve` makes before it opens the store.
#[test]
fn the_readmes_declared_queues_are_valid() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let example = readme
        .split("```toml\n")
        .map(|block| &block[..block.find("```").unwrap_or(block.len())])
        .find(|block| block.contains("[[queues]]"))
        .expect("a [[queues]] example");
    let settings = resolve_text(example).expect("the example resolves");
    assert_eq!(settings.queues.len(), 3);
    assert!(settings.queues[2].fifo);
}
