//! A Prometheus-like scraper beside a run: GETs a metrics URL at a fixed interval over one kept-alive
//! connection, so that a run with it and a run without it measure what being scraped costs the server.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The running scraper; `finish` stops it and summarises.
pub struct Scraper {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Summary>,
}

/// What the scrapes saw.
pub struct Summary {
    url: String,
    latencies: Vec<Duration>,
    failures: u64,
    bytes_last: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        let max = sorted.last().copied().unwrap_or_default();
        write!(
            f,
            "scrape {}: {} scrapes, {} failed, median {:.2} ms, max {:.2} ms, {} bytes",
            self.url,
            sorted.len(),
            self.failures,
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            self.bytes_last
        )
    }
}

pub fn spawn(url: String, interval: Duration) -> Scraper {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut summary = Summary {
            url: url.clone(),
            latencies: Vec::new(),
            failures: 0,
            bytes_last: 0,
        };
        let Ok(uri) = url.parse::<hyper::Uri>() else {
            summary.failures += 1;
            return summary;
        };
        let mut tick = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = &mut stopped => return summary,
                _ = tick.tick() => {}
            }
            let started = Instant::now();
            let body = match client.get(uri.clone()).await {
                Ok(response) if response.status().is_success() => {
                    response.into_body().collect().await.map(|b| b.to_bytes())
                }
                _ => {
                    summary.failures += 1;
                    continue;
                }
            };
            match body {
                Ok(bytes) => {
                    summary.latencies.push(started.elapsed());
                    summary.bytes_last = bytes.len();
                }
                Err(_) => summary.failures += 1,
            }
        }
    });
    Scraper { stop, task }
}

impl Scraper {
    pub async fn finish(self) -> String {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(summary) => summary.to_string(),
            Err(error) => format!("scraper failed: {error}"),
        }
    }
}
