//! The settings of the PostgreSQL backend and of the cluster (docs/cluster.md): their flags, their
//! config-file keys (`store`, `[postgres]`, `[cluster]`) and how they resolve (flags > environment > file >
//! defaults). The connection settings and their checks are veil_postgres::settings'; this node's part in the
//! cluster (name, lease, addresses) is the server's.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use veil_cluster::tls::TlsFiles;
use veil_http::CertFiles;
use veil_postgres::settings::{PostgresSettings as PgSettings, ShardSettings};
use veil_postgres::PgOptions;

use crate::config::ConfigError;

/// How long a partition's lease lasts unless renewed: a dead node's partitions are served again after at most
/// this (plus the new owner's load).
pub const LEASE_TTL_MS_DEFAULT: u64 = 5_000;
/// Below this a lease would be renewed more often than a loaded database answers reliably.
pub const LEASE_TTL_MS_MIN: u64 = 500;
/// Partitions of a new cluster (fixed when its database is first used): the load spreads over up to this many
/// nodes; one node holding them all keeps a PgStore (a load and a reader connection, a thread) per partition,
/// while its one writer commits for all of them. docs/cluster.md "Settings" has the trade-off and
/// docs/benchmarks.md the measurement.
pub const PARTITIONS_DEFAULT: u32 = 4;

/// Flags of `veil serve` for the store and the cluster.
#[derive(Args, Debug, Default)]
pub struct ClusterArgs {
    /// embedded: the store in --data-dir (one node); a PostgreSQL connection string (postgres://… or libpq
    /// key=value, several hosts allowed): any number of nodes share the database [default: embedded]
    #[arg(long, env = "VEIL_STORE")]
    pub store: Option<String>,
    /// This node's name in the lease table and the logs [default: <hostname>-<random hex>, new at each start]
    #[arg(long, env = "VEIL_NODE_ID")]
    pub node_id: Option<String>,
    /// How long a partition's lease lasts unless renewed (renewed every quarter of it) [default: 5000]
    #[arg(long, env = "VEIL_LEASE_TTL_MS")]
    pub lease_ttl_ms: Option<u64>,
    /// Address this node's internal RPC binds to (a port the system picks); other nodes send the engine
    /// calls of their clients there for the partitions this node owns [default: 127.0.0.1]
    #[arg(long, env = "VEIL_CLUSTER_BIND")]
    pub cluster_bind: Option<IpAddr>,
    /// Host name or address other nodes reach this node's internal RPC by [default: --cluster-bind]
    #[arg(long, env = "VEIL_CLUSTER_ADVERTISE")]
    pub cluster_advertise: Option<String>,
    /// Partitions of a new cluster, each owned by one node at a time; fixed by the first node that starts on
    /// a database, later values are ignored [default: 4]
    #[arg(long, env = "VEIL_PARTITIONS")]
    pub partitions: Option<u32>,
    /// Connections a node reads message bodies over, shared among its partitions, beside its writer connections
    /// [default: 4]
    #[arg(long, env = "VEIL_PG_POOL_SIZE")]
    pub pg_pool_size: Option<usize>,
    /// Writer connections of a node, shared among its partitions (at least one each), each committing the writes
    /// of its share of the queues [default: 1]
    #[arg(long, env = "VEIL_PG_WRITERS")]
    pub pg_writers: Option<usize>,
    /// How long a connection attempt may take before the database counts as down [default: 2000]
    #[arg(long, env = "VEIL_PG_CONNECT_TIMEOUT_MS")]
    pub pg_connect_timeout_ms: Option<u64>,
    /// PostgreSQL statement_timeout of every connection; also bounds each database call [default: 5000]
    #[arg(long, env = "VEIL_PG_STATEMENT_TIMEOUT_MS")]
    pub pg_statement_timeout_ms: Option<u64>,
    /// Schema of Veil's tables (created when missing) [default: veil]
    #[arg(long, env = "VEIL_PG_SCHEMA")]
    pub pg_schema: Option<String>,
    /// How often a node retries the database after a failure [default: 500]
    #[arg(long, env = "VEIL_PG_RETRY_INTERVAL_MS")]
    pub pg_retry_interval_ms: Option<u64>,
    /// Another database the partitions are spread over (repeat for each, in the same order on every node;
    /// replaces the config file's [[postgres.shards]]): partition p lives on shard p mod (1 + shards), shard 0
    /// being --store. Fixed when the cluster is created [default: none]
    #[arg(long = "pg-shard", value_name = "STORE")]
    pub pg_shards: Vec<String>,
    /// The cluster's CA bundle (PEM; several CAs during a rotation): the internal RPC serves and connects
    /// over TLS, and a node accepts only peers whose certificate chains to one of them and names
    /// veil-cluster-node. With --cluster-cert and --cluster-key; reloaded on SIGHUP [default: none]
    #[arg(long, env = "VEIL_CLUSTER_CA", value_name = "FILE")]
    pub cluster_ca: Option<PathBuf>,
    /// This node's certificate chain (PEM, leaf first), issued by the cluster's CA for the name
    /// veil-cluster-node with both serverAuth and clientAuth; reloaded on SIGHUP [default: none]
    #[arg(long, env = "VEIL_CLUSTER_CERT", value_name = "FILE")]
    pub cluster_cert: Option<PathBuf>,
    /// The private key of --cluster-cert (PEM) [default: none]
    #[arg(long, env = "VEIL_CLUSTER_KEY", value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// Serve the internal RPC without TLS on an address that is not loopback: the cluster token and every
    /// message body then cross the network in clear. Refused without this flag; logged as a warning at start
    #[arg(long, env = "VEIL_CLUSTER_INSECURE_PLAINTEXT")]
    pub cluster_insecure_plaintext: bool,
}

/// `[cluster]` of the config file.
#[derive(Deserialize, Debug, Default, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    node_id: Option<String>,
    lease_ttl_ms: Option<u64>,
    bind: Option<IpAddr>,
    advertise: Option<String>,
    partitions: Option<u32>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    insecure_plaintext: bool,
}

/// Where the queues live.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreSetting {
    /// One node, the embedded store in the data directory.
    Embedded,
    /// Nodes sharing a PostgreSQL database.
    Postgres(ClusterSettings),
}

/// The PostgreSQL backend (veil-postgres's own `PostgresSettings`, the connection) and this node's part in the
/// cluster, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSettings {
    /// The connection: the `store` key and the `[postgres]` table.
    pub pg: PgSettings,
    pub node_id: String,
    pub lease_ttl_ms: u64,
    pub bind: IpAddr,
    pub advertise: String,
    /// The partition count this node asks for when it is the first on the database.
    pub partitions: u32,
    /// TLS between the nodes (the CA bundle, this node's certificate and key); `None`: plaintext, allowed
    /// only on loopback or with `insecure_plaintext`.
    pub tls: Option<Box<TlsFiles>>,
    pub insecure_plaintext: bool,
}

impl ClusterSettings {
    /// The connection options, with every session guarded below the lease term.
    pub fn options(&self) -> PgOptions {
        self.pg.options().guarded_below(self.lease_ttl())
    }

    /// Every shard's connection options, the home (`store`) first, guarded as [`Self::options`].
    pub fn shard_options(&self) -> Vec<PgOptions> {
        let ttl = self.lease_ttl();
        self.pg
            .shard_options()
            .into_iter()
            .map(|options| options.guarded_below(ttl))
            .collect()
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    pub fn retry_interval(&self) -> Duration {
        self.pg.retry_interval()
    }
}

/// A flag given wins over the file's value (or its default).
fn set<T>(slot: &mut T, flag: Option<T>) {
    if let Some(value) = flag {
        *slot = value;
    }
}

impl StoreSetting {
    pub fn resolve(
        args: ClusterArgs,
        store: Option<String>,
        mut pg: PgSettings,
        cluster: ClusterFile,
    ) -> Result<Self, ConfigError> {
        let url = match args.store.or(store) {
            None => return Ok(Self::Embedded),
            Some(value) if value == "embedded" => return Ok(Self::Embedded),
            Some(value) => value,
        };
        url.parse::<tokio_postgres::Config>().map_err(|error| {
            ConfigError::Invalid(format!(
                "--store is neither `embedded` nor a PostgreSQL connection string: {error}"
            ))
        })?;
        pg.url = url;
        if !args.pg_shards.is_empty() {
            pg.shards = args
                .pg_shards
                .into_iter()
                .map(|store| ShardSettings { store })
                .collect();
        }
        for (index, shard) in pg.shards.iter().enumerate() {
            shard
                .store
                .parse::<tokio_postgres::Config>()
                .map_err(|error| {
                    ConfigError::Invalid(format!(
                        "shard {} is not a PostgreSQL connection string: {error}",
                        index + 1
                    ))
                })?;
        }
        set(&mut pg.pool_size, args.pg_pool_size);
        set(&mut pg.writers, args.pg_writers);
        set(&mut pg.connect_timeout_ms, args.pg_connect_timeout_ms);
        set(&mut pg.statement_timeout_ms, args.pg_statement_timeout_ms);
        set(&mut pg.schema, args.pg_schema);
        set(&mut pg.retry_interval_ms, args.pg_retry_interval_ms);
        let tls = match (
            args.cluster_ca.or(cluster.ca_file),
            args.cluster_cert.or(cluster.cert_file),
            args.cluster_key.or(cluster.key_file),
        ) {
            (None, None, None) => None,
            (Some(ca), Some(cert), Some(key)) => Some(Box::new(TlsFiles {
                ca,
                cert: CertFiles { cert, key },
            })),
            _ => {
                return Err(ConfigError::Invalid(
                    "the cluster's TLS needs its CA, certificate and key together \
                     (--cluster-ca, --cluster-cert, --cluster-key)"
                        .into(),
                ))
            }
        };
        let bind = args
            .cluster_bind
            .or(cluster.bind)
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let settings = ClusterSettings {
            pg,
            node_id: args
                .node_id
                .or(cluster.node_id)
                .unwrap_or_else(default_node_id),
            lease_ttl_ms: args
                .lease_ttl_ms
                .or(cluster.lease_ttl_ms)
                .unwrap_or(LEASE_TTL_MS_DEFAULT),
            bind,
            advertise: args
                .cluster_advertise
                .or(cluster.advertise)
                .unwrap_or_else(|| bind.to_string()),
            partitions: args
                .partitions
                .or(cluster.partitions)
                .unwrap_or(PARTITIONS_DEFAULT),
            tls,
            insecure_plaintext: args.cluster_insecure_plaintext || cluster.insecure_plaintext,
        };
        settings.validate()?;
        Ok(Self::Postgres(settings))
    }
}

impl ClusterSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        self.pg.validate()?;
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if self.lease_ttl_ms < LEASE_TTL_MS_MIN {
            return invalid(format!(
                "the lease ttl must be at least {LEASE_TTL_MS_MIN} ms"
            ));
        }
        let partitions_max = veil_postgres::limits::PARTITIONS_MAX;
        if self.partitions == 0 || self.partitions > partitions_max {
            return invalid(format!(
                "partitions must be 1 to {partitions_max}, not {}",
                self.partitions
            ));
        }
        if self.pg.schema.is_empty() || self.node_id.is_empty() || self.advertise.is_empty() {
            return invalid(
                "the pg schema, the node id and the advertised host must not be empty".into(),
            );
        }
        if self.tls.is_some() && self.insecure_plaintext {
            return invalid(
                "--cluster-insecure-plaintext and the cluster's TLS files exclude each other"
                    .into(),
            );
        }
        if self.tls.is_none() && !self.insecure_plaintext && !self.loopback_only() {
            return invalid(format!(
                "the cluster's internal RPC on {} (advertised as {}) is not loopback and has no TLS: \
                 give it the cluster's CA and this node's certificate (--cluster-ca, --cluster-cert, \
                 --cluster-key; `veil cert dev --cluster` makes a development set), or accept the \
                 token and message bodies in clear with --cluster-insecure-plaintext",
                self.bind, self.advertise
            ));
        }
        Ok(())
    }

    /// Whether the internal RPC binds and is reached on loopback only, where plaintext crosses no network.
    pub fn loopback_only(&self) -> bool {
        let advertised = self.advertise.trim_start_matches('[').trim_end_matches(']');
        let advertised_loopback = match advertised.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => advertised.eq_ignore_ascii_case("localhost"),
        };
        self.bind.is_loopback() && advertised_loopback
    }
}

/// The host's name and a random suffix drawn at every start: unique without configuration, even for two
/// containers that share a host name and are both pid 1. A node takes back a lease held under its own id
/// at once, so an id must never be shared by two live nodes; a restarted node is a new node.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "veil".to_owned());
    format!("{host}-{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use veil_postgres::connect::CONNECT_TIMEOUT_MS_DEFAULT;
    use veil_postgres::settings::RETRY_INTERVAL_MS_DEFAULT;

    use super::*;
    use crate::config::{ServeArgs, Settings};

    fn resolve(file: &str, args: ClusterArgs) -> Result<StoreSetting, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("veil.toml");
        std::fs::write(&path, file).unwrap();
        let args = ServeArgs {
            config: Some(path),
            cluster: args,
            ..ServeArgs::default()
        };
        Settings::resolve(args).map(|settings| settings.store)
    }

    #[test]
    fn the_embedded_store_is_the_default() {
        assert_eq!(
            resolve("", ClusterArgs::default()).unwrap(),
            StoreSetting::Embedded
        );
        let named = "store = \"embedded\"\n";
        assert_eq!(
            resolve(named, ClusterArgs::default()).unwrap(),
            StoreSetting::Embedded
        );
    }

    #[test]
    fn postgres_settings_come_from_flags_over_the_file_over_defaults() {
        let file = "store = \"postgres://veil@db:5432/veil\"\n\
                    [postgres]\npool_size = 8\nwriters = 6\nstatement_timeout_ms = 900\nschema = \"q\"\n\
                    [cluster]\nnode_id = \"from-file\"\nlease_ttl_ms = 2500\nbind = \"10.0.0.5\"\n\
                    partitions = 16\ninsecure_plaintext = true\n";
        let args = ClusterArgs {
            node_id: Some("from-flag".into()),
            pg_pool_size: Some(2),
            ..ClusterArgs::default()
        };
        let StoreSetting::Postgres(postgres) = resolve(file, args).unwrap() else {
            panic!("expected PostgreSQL");
        };
        assert_eq!(postgres.pg.url, "postgres://veil@db:5432/veil");
        assert_eq!(postgres.node_id, "from-flag");
        assert_eq!(postgres.pg.pool_size, 2);
        assert_eq!(postgres.pg.writers, 6);
        assert_eq!(postgres.options().writers, 6);
        assert_eq!(postgres.pg.statement_timeout_ms, 900);
        assert_eq!(postgres.pg.connect_timeout_ms, CONNECT_TIMEOUT_MS_DEFAULT);
        assert_eq!(postgres.pg.retry_interval_ms, RETRY_INTERVAL_MS_DEFAULT);
        assert_eq!(postgres.pg.schema, "q");
        assert_eq!(postgres.lease_ttl_ms, 2500);
        assert_eq!(postgres.partitions, 16);
        assert_eq!(
            postgres.advertise, "10.0.0.5",
            "advertised as the bind address by default"
        );
        let options = postgres.options();
        assert_eq!(
            options.call_timeout(),
            Duration::from_millis(900 + CONNECT_TIMEOUT_MS_DEFAULT)
        );
    }

    #[test]
    fn shards_come_from_the_file_or_replace_it_from_flags() {
        let file = "store = \"postgres://veil@a/veil\"\n\
                    [[postgres.shards]]\nstore = \"postgres://veil@b/veil\"\n\
                    [[postgres.shards]]\nstore = \"host=c user=veil\"\n";
        let StoreSetting::Postgres(postgres) = resolve(file, ClusterArgs::default()).unwrap()
        else {
            panic!("expected PostgreSQL");
        };
        let urls: Vec<String> = postgres
            .shard_options()
            .into_iter()
            .map(|options| options.url)
            .collect();
        assert_eq!(
            urls,
            [
                "postgres://veil@a/veil",
                "postgres://veil@b/veil",
                "host=c user=veil"
            ]
        );
        let flags = ClusterArgs {
            pg_shards: vec!["postgres://veil@d/veil".into()],
            ..ClusterArgs::default()
        };
        let StoreSetting::Postgres(postgres) = resolve(file, flags).unwrap() else {
            panic!("expected PostgreSQL");
        };
        assert_eq!(
            postgres.shard_options().len(),
            2,
            "the flags replace the file's list"
        );
        let bad = ClusterArgs {
            store: Some("postgres://veil@a/veil".into()),
            pg_shards: vec!["postgres://[".into()],
            ..ClusterArgs::default()
        };
        let refused = resolve("", bad).unwrap_err().to_string();
        assert!(
            refused.contains("shard 1 is not a PostgreSQL connection string"),
            "{refused}"
        );
    }

    #[test]
    fn a_multi_host_libpq_string_is_a_postgres_store() {
        let args = ClusterArgs {
            store: Some("host=a,b port=5432,5433 user=veil target_session_attrs=read-write".into()),
            ..ClusterArgs::default()
        };
        assert!(matches!(
            resolve("", args).unwrap(),
            StoreSetting::Postgres(_)
        ));
    }

    #[test]
    fn a_plaintext_cluster_beyond_loopback_is_refused_unless_insecure_is_set() {
        let with = |args: ClusterArgs| {
            resolve(
                "",
                ClusterArgs {
                    store: Some("postgres://veil@db/veil".into()),
                    ..args
                },
            )
        };
        assert!(with(ClusterArgs::default()).is_ok(), "loopback plaintext");
        let public = with(ClusterArgs {
            cluster_bind: Some("0.0.0.0".parse().unwrap()),
            ..ClusterArgs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(public.contains("not loopback and has no TLS"), "{public}");
        let advertised = with(ClusterArgs {
            cluster_advertise: Some("node1.internal".into()),
            ..ClusterArgs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(advertised.contains("not loopback"), "{advertised}");
        assert!(with(ClusterArgs {
            cluster_bind: Some("0.0.0.0".parse().unwrap()),
            cluster_insecure_plaintext: true,
            ..ClusterArgs::default()
        })
        .is_ok());
        let tls = ClusterArgs {
            cluster_bind: Some("0.0.0.0".parse().unwrap()),
            cluster_ca: Some("ca.pem".into()),
            cluster_cert: Some("cert.pem".into()),
            cluster_key: Some("key.pem".into()),
            ..ClusterArgs::default()
        };
        let Ok(StoreSetting::Postgres(postgres)) = with(tls) else {
            panic!("TLS beyond loopback is allowed");
        };
        assert_eq!(
            postgres.tls.map(|tls| tls.ca),
            Some(PathBuf::from("ca.pem"))
        );
        let half = with(ClusterArgs {
            cluster_ca: Some("ca.pem".into()),
            ..ClusterArgs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(half.contains("CA, certificate and key together"), "{half}");
    }

    #[test]
    fn out_of_range_cluster_settings_are_refused() {
        let refused = |args: ClusterArgs| {
            let args = ClusterArgs {
                store: Some("postgres://veil@db/veil".into()),
                ..args
            };
            resolve("", args).unwrap_err().to_string()
        };
        let short = refused(ClusterArgs {
            lease_ttl_ms: Some(100),
            ..ClusterArgs::default()
        });
        assert!(short.contains("lease ttl"), "{short}");
        let pool = refused(ClusterArgs {
            pg_pool_size: Some(0),
            ..ClusterArgs::default()
        });
        assert!(pool.contains("pool size"), "{pool}");
        let writers = refused(ClusterArgs {
            pg_writers: Some(17),
            ..ClusterArgs::default()
        });
        assert!(writers.contains("pg writers must be 1 to 16"), "{writers}");
        let partitions = refused(ClusterArgs {
            partitions: Some(0),
            ..ClusterArgs::default()
        });
        assert!(
            partitions.contains("partitions must be 1 to"),
            "{partitions}"
        );
        let garbage = resolve(
            "",
            ClusterArgs {
                store: Some("postgres://[".into()),
                ..ClusterArgs::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(garbage.contains("connection string"), "{garbage}");
    }
}
