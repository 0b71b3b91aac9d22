//! `veil cert dev`: a development certificate authority and a server certificate it signed for this machine
//! (localhost, 127.0.0.1, ::1 and any `--host`), written as PEM for `veil serve --tls-cert/--tls-key`, with
//! how to make each SDK trust it (docs/security.md "TLS"). Local only: it talks to no server. The CA's private
//! key is not kept, so the CA can sign nothing else: trusting `ca.pem` trusts this one certificate. With
//! `--cluster`, a cluster's set instead: a CA and one node certificate for every node's TLS between nodes
//! (docs/cluster.md "TLS between nodes").

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

/// Validity of the development certificates: 825 days, the longest that Apple's TLS clients accept for a
/// server certificate, so one file works for every client.
const DEV_CERT_VALIDITY_DAYS: i64 = 825;
/// Backdating of `notBefore`, so a client whose clock runs a little behind still accepts a fresh certificate.
const DEV_CERT_BACKDATE_HOURS: i64 = 1;
/// Names every development server certificate covers.
const DEV_CERT_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Write a development CA (ca.pem) and a server certificate it signed (cert.pem: leaf + CA, key.pem)
    /// for localhost, 127.0.0.1 and ::1, and print how to trust it; with --cluster, a cluster's CA and node
    /// certificate for TLS between nodes.
    Dev(DevArgs),
}

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Directory to write ca.pem, cert.pem and key.pem into (created if missing)
    #[arg(long, default_value = "./veil-tls")]
    pub out: PathBuf,
    /// An extra DNS name or IP address the certificate covers (repeatable)
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Overwrite files already there
    #[arg(long)]
    pub force: bool,
    /// Make a cluster's set instead: a CA (ca.pem) and a node certificate (cert.pem, key.pem) for the name
    /// veil-cluster-node with serverAuth and clientAuth, for every node's --cluster-ca, --cluster-cert and
    /// --cluster-key (TLS between the nodes, docs/cluster.md)
    #[arg(long)]
    pub cluster: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} already exists (use --force to overwrite)")]
    Exists(PathBuf),
}

/// Runs `veil cert …`; exit code 0 on success, 1 on failure (printed to stderr).
pub fn run(command: CertCommand) -> std::process::ExitCode {
    let CertCommand::Dev(args) = command;
    match dev(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The PEM texts of one development certificate.
pub struct DevCert {
    pub ca_pem: String,
    /// The leaf, then the CA: servers send the chain.
    pub chain_pem: String,
    pub key_pem: String,
}

/// A new development CA and a leaf for `DEV_CERT_NAMES` and `hosts`.
pub fn generate(hosts: &[String]) -> Result<DevCert, rcgen::Error> {
    let mut names: Vec<String> = DEV_CERT_NAMES.iter().map(|n| n.to_string()).collect();
    names.extend(
        hosts
            .iter()
            .filter(|h| !names.contains(h))
            .cloned()
            .collect::<Vec<_>>(),
    );
    generate_for(names, vec![ExtendedKeyUsagePurpose::ServerAuth])
}

/// A new development CA for a cluster and a node certificate it signed: the name every node verifies
/// (`veil_cluster::tls::NODE_NAME`), usable as server and as client, which every node of the cluster may
/// share (the CA's key is not kept, as for `generate`).
pub fn generate_cluster() -> Result<DevCert, rcgen::Error> {
    generate_for(
        vec![veil_cluster::tls::NODE_NAME.to_owned()],
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    )
}

fn generate_for(
    names: Vec<String>,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> Result<DevCert, rcgen::Error> {
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(DEV_CERT_BACKDATE_HOURS);
    let not_after = now + time::Duration::days(DEV_CERT_VALIDITY_DAYS);

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "Veil development CA");
    ca.distinguished_name
        .push(DnType::OrganizationName, "Veil (development only)");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    ca.serial_number = Some(serial());
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;

    let common_name = names.first().cloned().unwrap_or_default();
    let mut leaf = CertificateParams::new(names)?;
    leaf.distinguished_name
        .push(DnType::CommonName, common_name);
    leaf.extended_key_usages = usages;
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    leaf.serial_number = Some(serial());
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key)?;
    Ok(DevCert {
        ca_pem: ca_cert.pem(),
        chain_pem: format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// A random positive 127-bit serial: each certificate, even for the same names, is told apart by it.
fn serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

fn dev(args: &DevArgs) -> Result<(), CertError> {
    let out = &args.out;
    let ca_path = out.join("ca.pem");
    let cert_path = out.join("cert.pem");
    let key_path = out.join("key.pem");
    if !args.force {
        for path in [&ca_path, &cert_path, &key_path] {
            if path.exists() {
                return Err(CertError::Exists(path.clone()));
            }
        }
    }
    std::fs::create_dir_all(out).map_err(|source| CertError::Write {
        path: out.clone(),
        source,
    })?;
    let cert = if args.cluster {
        generate_cluster()?
    } else {
        generate(&args.hosts)?
    };
    write(&ca_path, &cert.ca_pem, 0o644)?;
    write(&cert_path, &cert.chain_pem, 0o644)?;
    write(&key_path, &cert.key_pem, 0o600)?;
    if args.cluster {
        print_cluster_usage(&ca_path, &cert_path, &key_path);
    } else {
        print_usage(&ca_path, &cert_path, &key_path, &args.hosts);
    }
    Ok(())
}

/// Writes `text` to `path` with `mode` (the key: 0600, readable by its owner only), replacing the file.
fn write(path: &Path, text: &str, mode: u32) -> Result<(), CertError> {
    let error = |source| CertError::Write {
        path: path.into(),
        source,
    };
    // Removed first: an existing file would keep its old, possibly wider, mode.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(error(e)),
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(error)?;
    // The umask narrows a created file's mode, and a strange one could leave the key without its owner's
    // read bit: set it exactly.
    #[cfg(unix)]
    file.set_permissions(
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(mode),
    )
    .map_err(error)?;
    file.write_all(text.as_bytes()).map_err(error)?;
    file.sync_all().map_err(error)
}

fn print_usage(ca: &Path, cert: &Path, key: &Path, hosts: &[String]) {
    let (ca, cert, key) = (ca.display(), cert.display(), key.display());
    let mut names = DEV_CERT_NAMES.join(", ");
    for host in hosts {
        names.push_str(", ");
        names.push_str(host);
    }
    // Written, not println!: a closed stdout (`veil cert dev | head`) is no reason to fail after the files.
    let _ = writeln!(
        std::io::stdout(),
        "\
Wrote a development certificate for {names}:
  {ca}    the development CA: trust this file, and only on development machines
  {cert}  the server certificate (leaf + CA)
  {key}   its private key (mode 0600)

Serve TLS on every listener:
  veil serve --tls-cert {cert} --tls-key {key}
  (or VEIL_TLS_CERT / VEIL_TLS_KEY, or tls_cert / tls_key in the config file; reload with SIGHUP)

Trust it in the clients:
  boto3:          boto3.client(\"sqs\", endpoint_url=\"https://localhost:9324\", verify=\"{ca}\")
  aws CLI / SDKs: AWS_CA_BUNDLE={ca}   (or aws --ca-bundle {ca})
  azure SDK:      QueueClient.from_connection_string(conn, \"q\", connection_verify=\"{ca}\")
                  with DefaultEndpointsProtocol=https;QueueEndpoint=https://127.0.0.1:10001/devstoreaccount1
  kubemq SDK:     kubemq.queues.Client(address=\"localhost:50000\", tls=True, tls_ca_file=\"{ca}\")
  curl:           curl --cacert {ca} https://localhost:9325/healthz
  veil CLI:       veil --ca-file {ca} --endpoint https://localhost:9325 queues list"
    );
}

fn print_cluster_usage(ca: &Path, cert: &Path, key: &Path) {
    let (ca, cert, key) = (ca.display(), cert.display(), key.display());
    let _ = writeln!(
        std::io::stdout(),
        "\
Wrote a development set for TLS between a cluster's nodes:
  {ca}    the cluster's CA (its key is not kept: it signs nothing else)
  {cert}  a node certificate for {name} (serverAuth + clientAuth; leaf + CA), for every node
  {key}   its private key (mode 0600)

Run every node with:
  veil serve --store postgres://… --cluster-ca {ca} --cluster-cert {cert} --cluster-key {key}
  (or VEIL_CLUSTER_CA / VEIL_CLUSTER_CERT / VEIL_CLUSTER_KEY, or ca_file / cert_file / key_file in [cluster];
  reload with SIGHUP)",
        name = veil_cluster::tls::NODE_NAME
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dev_certificate_is_a_chain_of_leaf_and_ca_with_a_key_rustls_accepts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = DevArgs {
            out: dir.path().join("tls"),
            hosts: vec!["veil.test".into()],
            force: false,
            cluster: false,
        };
        dev(&args).expect("dev");
        let files = veil_http::CertFiles {
            cert: args.out.join("cert.pem"),
            key: args.out.join("key.pem"),
        };
        veil_http::ReloadingCert::load(files).expect("rustls loads it");
        let chain = std::fs::read_to_string(args.out.join("cert.pem")).expect("read");
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(args.out.join("key.pem"))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A second run does not overwrite without --force.
        assert!(matches!(dev(&args), Err(CertError::Exists(_))));
    }

    #[test]
    fn the_cluster_set_is_accepted_by_the_nodes_tls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = DevArgs {
            out: dir.path().join("cluster"),
            hosts: Vec::new(),
            force: false,
            cluster: true,
        };
        dev(&args).expect("dev");
        let files = veil_cluster::tls::TlsFiles {
            ca: args.out.join("ca.pem"),
            cert: veil_http::CertFiles {
                cert: args.out.join("cert.pem"),
                key: args.out.join("key.pem"),
            },
        };
        let tls = veil_cluster::tls::ClusterTls::load(&files).expect("the node's TLS loads it");
        tls.server_config().expect("a server configuration");
        tls.client_config().expect("a client configuration");
    }
}
