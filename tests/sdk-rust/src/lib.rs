//! The harness of the AWS SDK for Rust tests: it starts the real `veil serve` binary (named by `VEIL_BIN`) on
//! free ports of 127.0.0.1 with a temporary data dir, waits until it listens, stops it when dropped, and builds
//! an `aws_sdk_sqs::Client` for it. It exists so that the tests in `tests/` see Veil exactly as an application
//! using the Rust SDK does: the SDK's own SigV4 signer, its AWS JSON 1.0 codec and its error parsing.

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use md5::{Digest, Md5};

/// The account of the development credential `test` / `test`, in every queue URL and ARN.
pub const ACCOUNT: &str = "000000000000";
pub const REGION: &str = "us-east-1";

/// `veil serve`'s default ports (SQS, Azure, KubeMQ, admin): never handed out, so a server started with the
/// defaults elsewhere cannot collide with one of ours.
const DEFAULT_PORTS: [u16; 4] = [9324, 10001, 50000, 9325];

/// The binary under test, from `VEIL_BIN`; panics with how to build it when it is missing.
pub fn veil_bin() -> PathBuf {
    let hint = "build it with `cargo build --release --bin veil` in the repository root and run \
                `VEIL_BIN=$PWD/target/release/veil tests/sdk-rust/run`";
    let Some(path) = std::env::var_os("VEIL_BIN") else {
        panic!("VEIL_BIN is not set: it must name the veil binary to test; {hint}");
    };
    let path = PathBuf::from(path);
    if !is_executable(&path) {
        panic!(
            "VEIL_BIN={} is not an executable file; {hint}",
            path.display()
        );
    }
    path
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A port of 127.0.0.1 nobody listens on right now (the kernel's choice) and that no other server of this
/// process was given: the kernel may hand a port it just gave out to the next bind, and the tests of a file
/// start their servers in parallel. Another process may still take it before the server binds it; `Veil::start`
/// then tries new ports.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !DEFAULT_PORTS.contains(&port) && !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// One `veil serve` process with its own data dir and a free port for each listener (SQS, Azure Queue
/// Storage, KubeMQ, admin), so that tests running in parallel never share a server or a port. It runs on the
/// test clock (`--unsafe-test-clock`, docs/testing.md "Test clock"): a test moves time past a visibility
/// timeout with [`Veil::advance_clock`] instead of sleeping through it.
pub struct Veil {
    child: Option<Child>,
    pub sqs_port: u16,
    admin_port: u16,
    /// Data dir and log; removed when the server stops, kept (and named) when a test failed.
    dir: PathBuf,
}

impl Veil {
    /// Starts a server and returns once all four listeners accept connections (at most 20 s). A port taken
    /// by another process between `free_port` and the server's bind ("Address already in use") is retried
    /// with new ports, up to 5 times.
    pub fn start() -> Veil {
        let dir = temp_dir();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Veil::start_in(dir.clone()) {
                Ok(veil) => return veil,
                Err(veil) if attempts < 5 && veil.log_tail().contains("Address already in use") => {
                    drop(veil)
                }
                Err(veil) => panic!("veil exited before listening\n{}", veil.log_tail()),
            }
        }
    }

    /// One attempt: the server when it listens, or the exited server (to read its log) when it did not.
    fn start_in(dir: PathBuf) -> Result<Veil, Veil> {
        let bin = veil_bin();
        // A failed attempt's drop removed the directory.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&dir)
            .expect("create the temp dir");
        let ports = [free_port(), free_port(), free_port(), free_port()];
        let log = std::fs::File::create(dir.join("veil.log")).expect("create the server log");
        let mut cmd = Command::new(&bin);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--sqs-listen", &format!("127.0.0.1:{}", ports[0])])
            .args(["--azure-listen", &format!("127.0.0.1:{}", ports[1])])
            .args(["--kubemq-listen", &format!("127.0.0.1:{}", ports[2])])
            .args(["--admin-listen", &format!("127.0.0.1:{}", ports[3])])
            .args(["--log-level", "info"])
            .arg("--unsafe-test-clock")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup the log"))
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        record_pid(child.id());
        let mut veil = Veil {
            child: Some(child),
            sqs_port: ports[0],
            admin_port: ports[3],
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if veil
                .child
                .as_mut()
                .unwrap()
                .try_wait()
                .expect("wait for veil")
                .is_some()
            {
                return Err(veil);
            }
            let listening = ports.iter().all(|&p| {
                let addr = SocketAddr::from(([127, 0, 0, 1], p));
                TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
            });
            if listening {
                return Ok(veil);
            }
            if Instant::now() > deadline {
                panic!(
                    "veil did not listen on {ports:?} within 20 s\n{}",
                    veil.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.sqs_port)
    }

    /// A client with the development credential `test` / `test`.
    pub fn client(&self) -> aws_sdk_sqs::Client {
        self.client_with("test", "test")
    }

    /// A client signing with the given access key and secret; retries off, so every error is seen as answered.
    pub fn client_with(&self, access_key: &str, secret: &str) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new(
                access_key,
                secret,
                None,
                None,
                "veil-tests",
            ))
            .endpoint_url(self.endpoint())
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// Moves the server's clock `seconds` forward (its admin API's `POST /api/v1/test/clock/advance`); when
    /// it returns, messages whose visibility ran out by then are visible and long polls re-checked.
    pub fn advance_clock(&self, seconds: u64) {
        let body = format!("{{\"by_ms\": {}}}", seconds * 1000);
        let answer = self.admin_request("POST", "/api/v1/test/clock/advance", &body);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "the clock advance was refused: {answer}"
        );
    }

    /// `veil_queue_long_polls_waiting` of the default account's `queue`: receives parked on it now.
    pub fn long_polls_waiting(&self, queue: &str) -> u64 {
        let answer = self.admin_request("GET", "/metrics", "");
        let label = format!("queue=\"{queue}\"");
        answer
            .lines()
            .find(|line| line.starts_with("veil_queue_long_polls_waiting{") && line.contains(&label))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse::<f64>().ok())
            .map_or(0, |value| value as u64)
    }

    /// One request to the admin endpoint over a fresh connection; the whole answer, head and body.
    fn admin_request(&self, method: &str, path: &str, body: &str) -> String {
        use std::io::Write;
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.admin_port)).expect("the admin endpoint");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send to the admin endpoint");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("the admin endpoint's answer");
        answer
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        let path = self.dir.join("veil.log");
        if let Ok(mut f) = std::fs::File::open(&path) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        format!(
            "--- last {} lines of {} ---\n{}",
            tail.len(),
            path.display(),
            tail.join("\n")
        )
    }
}

impl Drop for Veil {
    /// SIGTERM and up to 20 s for a clean exit, then SIGKILL. A failing test also gets the server's log.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail());
        }
        if matches!(child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on a child not yet reaped (try_wait saw it running), so its pid is still its own.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        forget_pid(child.id());
        if std::thread::panicking() {
            eprintln!(
                "kept the server's data dir and log in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A new directory under the system's temp dir, unique across processes and tests (no tempfile crate: it
/// would add rustix and getrandom to the compile for one mkdir).
fn temp_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("veil-sdk-rust-{}-{n}-{nanos}", std::process::id()));
        // Private, as veil wants its data dir (it would otherwise fix the mode and warn).
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create {}: {e}", dir.display()),
        }
    }
}

/// scripts/test gives its servers a pid dir (`VEIL_E2E_PID_DIR`) and kills whatever is left in it on exit.
fn record_pid(pid: u32) {
    if let Some(dir) = std::env::var_os("VEIL_E2E_PID_DIR") {
        let _ = std::fs::write(Path::new(&dir).join(format!("{pid}.pid")), pid.to_string());
    }
}

fn forget_pid(pid: u32) {
    if let Some(dir) = std::env::var_os("VEIL_E2E_PID_DIR") {
        let _ = std::fs::remove_file(Path::new(&dir).join(format!("{pid}.pid")));
    }
}

/// Hex MD5 of a message body, as SQS returns it in MD5OfMessageBody.
pub fn md5_hex(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The digest SQS and its SDKs compute over message attributes (MD5OfMessageAttributes): for each attribute
/// sorted by name, the length-prefixed (4-byte big-endian) name and data type, then a transport byte (1 string
/// and number, 2 binary) and the length-prefixed value. Computed here independently of Veil's veil_sqs::md5.
pub fn md5_of_message_attributes(attrs: &HashMap<String, MessageAttributeValue>) -> String {
    fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
        buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        buf.extend_from_slice(bytes);
    }
    let mut names: Vec<&String> = attrs.keys().collect();
    names.sort();
    let mut buf = Vec::new();
    for name in names {
        let value = &attrs[name];
        put(&mut buf, name.as_bytes());
        put(&mut buf, value.data_type().as_bytes());
        if let Some(s) = value.string_value() {
            buf.push(1);
            put(&mut buf, s.as_bytes());
        } else {
            buf.push(2);
            put(
                &mut buf,
                value
                    .binary_value()
                    .expect("a string or a binary value")
                    .as_ref(),
            );
        }
    }
    md5_hex(&buf)
}

/// Creates a standard queue with default attributes; its URL.
pub async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("a QueueUrl")
}

/// One receive of up to 10 messages with every system and message attribute, waiting up to `wait` seconds;
/// `visibility` overrides the queue's timeout when given.
pub async fn receive(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    visibility: Option<i32>,
    wait: i32,
) -> Vec<Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .set_visibility_timeout(visibility)
        .wait_time_seconds(wait)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .expect("ReceiveMessage")
        .messages
        .unwrap_or_default()
}

/// A system attribute of a received message (`ApproximateReceiveCount`, `SequenceNumber`, …).
pub fn system_attribute(m: &Message, name: MessageSystemAttributeName) -> Option<&str> {
    m.attributes.as_ref()?.get(&name).map(String::as_str)
}

/// The queue's tags (none is an empty map).
pub async fn queue_tags(sqs: &aws_sdk_sqs::Client, url: &str) -> HashMap<String, String> {
    sqs.list_queue_tags()
        .queue_url(url)
        .send()
        .await
        .expect("ListQueueTags")
        .tags
        .unwrap_or_default()
}
