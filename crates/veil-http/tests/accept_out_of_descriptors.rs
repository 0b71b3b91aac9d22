//! The accept loop out of file descriptors (docs/security.md "Every listener's accept loop"): with the
//! process's descriptor limit reached, accepts fail with EMFILE; the loop counts them, backs off and accepts
//! again once descriptors are free, and never ends. A test binary of its own, since it lowers the whole
//! process's limit.

use std::time::Duration;

use tokio::net::TcpListener;
use veil_http::Limits;

const LISTENER: &str = "test-out-of-descriptors";
/// Descriptors left for the test's clients above those open when it starts.
const HEADROOM_FDS: u64 = 16;
const WAIT_MS_MAX: u64 = 10_000;

fn nofile() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit
}

fn set_nofile(limit: libc::rlimit) {
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count() as u64
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_accept_loop_backs_off_and_accepts_again_once_they_are_free() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let mut accepted = veil_http::accept(LISTENER, listener, None, Limits::default());
    let original = nofile();
    set_nofile(libc::rlimit {
        rlim_cur: open_fds() + HEADROOM_FDS,
        rlim_max: original.rlim_max,
    });
    // Every client takes one descriptor and its accepted end another, until the server's accept fails; the
    // connections beyond wait in the listen backlog.
    let mut clients = Vec::new();
    let mut conns = Vec::new();
    let metrics = veil_telemetry::listeners();
    while metrics.accept_errors(LISTENER) == 0 {
        match std::net::TcpStream::connect(address) {
            Ok(client) => clients.push(client),
            Err(_) => {
                // The client side ran out first: the server's next accept fails for the same reason.
                wait_until("an accept error", || metrics.accept_errors(LISTENER) > 0).await;
                break;
            }
        }
        while let Ok(conn) = accepted.try_recv() {
            conns.push(conn);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !conns.is_empty(),
        "some connections were accepted before the limit"
    );
    // Free the descriptors: the backlog's connections are accepted, and a new one too.
    drop(conns);
    set_nofile(original);
    let before = clients.len();
    clients.truncate(0);
    let _client = std::net::TcpStream::connect(address).expect("connect after freeing");
    let mut late = 0;
    tokio::time::timeout(Duration::from_millis(WAIT_MS_MAX), async {
        while late < 1 {
            accepted.recv().await.expect("the accept loop still runs");
            late += 1;
        }
    })
    .await
    .expect("a connection accepted once descriptors were free");
    assert!(before > 0);
    assert_eq!(metrics.failures(LISTENER), 0);
}
