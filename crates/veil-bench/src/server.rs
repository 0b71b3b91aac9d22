//! Veil processes the suite and the smoke test start themselves: a temp data dir, a free loopback port,
//! readiness by a real request (so start-up time is measured to the first success), resident memory from
//! /proc, and a graceful stop (SIGTERM) by the process's own PID.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::targets::sqs::SqsTarget;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot start {bin}: {source}")]
    Spawn {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot find a free loopback port: {0}")]
    Port(std::io::Error),
    #[error("veil did not answer within {waited:?} (log: {log})")]
    NotReady { waited: Duration, log: PathBuf },
    #[error("veil exited during start-up with {status} (log: {log})")]
    Exited {
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    #[error("cannot read the memory of pid {pid}: {source}")]
    Memory { pid: u32, source: std::io::Error },
    #[error("{0}")]
    Target(#[from] crate::target::TargetError),
}

/// How a started Veil stores data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    Durable,
    Relaxed,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Durable => "durable",
            Durability::Relaxed => "relaxed",
        }
    }
}

/// A running `veil serve`. Dropping it kills the process (SIGKILL) if `stop` was not called.
pub struct VeilProcess {
    child: Child,
    pub pid: u32,
    pub endpoint: String,
    /// The Azure Queue Storage front-end, path style with the development account.
    pub azure_endpoint: String,
    /// The KubeMQ gRPC front-end.
    pub kubemq_endpoint: String,
    /// Spawn → first successful request.
    pub startup: Duration,
}

/// Options of one start.
#[derive(Clone, Debug)]
pub struct VeilOptions {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub durability: Durability,
    /// `--inflight-max`: the scale scenario hides more than SQS's default 120,000.
    pub inflight_max: Option<u32>,
    pub ready_timeout: Duration,
}

/// `N` distinct free loopback ports: the listeners are all held until each has its port, so the OS cannot
/// hand out the same one twice.
fn free_ports<const N: usize>() -> Result<[u16; N], ServerError> {
    let listeners = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").map_err(ServerError::Port))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(ServerError::Port)?.port();
    }
    Ok(ports)
}

impl VeilProcess {
    /// Starts Veil and waits until a ListQueues succeeds.
    pub async fn start(options: &VeilOptions) -> Result<Self, ServerError> {
        let [port, azure_port, kubemq_port, admin_port] = free_ports()?;
        let listen = format!("127.0.0.1:{port}");
        let azure_listen = format!("127.0.0.1:{azure_port}");
        let kubemq_listen = format!("127.0.0.1:{kubemq_port}");
        let admin_listen = format!("127.0.0.1:{admin_port}");
        let log = options.data_dir.with_extension("log");
        let log_file = std::fs::File::create(&log).map_err(|source| ServerError::Spawn {
            bin: options.bin.clone(),
            source,
        })?;
        let mut command = Command::new(&options.bin);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&options.data_dir)
            .arg("--sqs-listen")
            .arg(&listen)
            // Free ports rather than the Azure (10001), KubeMQ (50000) and admin (9325) defaults, so that servers started
            // side by side, or beside an Azurite on 10001, do not collide; the suite drives these
            // front-ends too (`--front-ends`).
            .arg("--azure-listen")
            .arg(&azure_listen)
            .arg("--kubemq-listen")
            .arg(&kubemq_listen)
            .arg("--admin-listen")
            .arg(&admin_listen)
            .arg("--durability")
            .arg(options.durability.as_str())
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true);
        if let Some(max) = options.inflight_max {
            command.arg("--inflight-max").arg(max.to_string());
        }
        let spawned = Instant::now();
        let mut child = command.spawn().map_err(|source| ServerError::Spawn {
            bin: options.bin.clone(),
            source,
        })?;
        let pid = child.id().unwrap_or(0);
        let endpoint = format!("http://{listen}");
        let client = SqsTarget::connect(&endpoint).await?;
        loop {
            if client.ping().await.is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ServerError::Exited { status, log });
            }
            if spawned.elapsed() > options.ready_timeout {
                let _ = child.start_kill();
                return Err(ServerError::NotReady {
                    waited: options.ready_timeout,
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Self {
            child,
            pid,
            endpoint,
            azure_endpoint: format!("http://{azure_listen}/devstoreaccount1"),
            kubemq_endpoint: format!("http://{kubemq_listen}"),
            startup: spawned.elapsed(),
        })
    }

    /// Resident memory of the process in bytes (VmRSS of /proc/PID/status).
    pub fn rss_bytes(&self) -> Result<u64, ServerError> {
        rss_of(self.pid)
    }

    /// SIGTERM (Veil's graceful shutdown closes the store), then SIGKILL if it has not exited in 30 s.
    pub async fn stop(mut self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            if pid > 0 {
                // SAFETY: kill(2) with a PID this process spawned and has not yet reaped; no memory is touched.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// VmRSS of a process, in bytes.
pub fn rss_of(pid: u32) -> Result<u64, ServerError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|source| ServerError::Memory { pid, source })?;
    parse_vm_rss(&status).ok_or_else(|| ServerError::Memory {
        pid,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "no VmRSS line"),
    })
}

/// The `VmRSS:   12345 kB` line of /proc/PID/status, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tveil\nVmPeak:\t  999 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(12_345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tveil\n"), None);
    }

    #[test]
    fn own_rss_is_readable() {
        assert!(rss_of(std::process::id()).is_ok_and(|rss| rss > 0));
    }
}
