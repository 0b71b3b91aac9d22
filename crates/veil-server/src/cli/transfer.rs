//! `veil export` and `veil import`: a queue's messages as JSON Lines and back. Export browses
//! (`state=all`, paged by `from_seq`), so it never receives: nothing is hidden, counted or changed. Its first
//! line is a header with the queue's kind and settings (`{"veil_export":1,...}`), which `import --create`
//! gives the queue it creates. Import sends in batches of at most 1000; the server assigns new ids.

use std::io::{BufRead, BufWriter, IsTerminal, Write};
use std::os::unix::fs::FileTypeExt as _;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::client::{queue_path, typed};
use super::messages::{browse_page, ViewList};
use super::redrive::{draw_target, progress_bar};
use super::{CliError, Context, QueueArg};

/// Messages per browse page: large pages cost fewer round trips, smaller ones less memory per answer.
const EXPORT_PAGE: usize = 500;
/// The API takes at most this many messages per send.
const IMPORT_BATCH_MESSAGES: usize = 1000;
/// And at most 64 MiB per request: batches stay well below it whatever the bodies' sizes.
const IMPORT_BATCH_BYTES: usize = 32 * 1024 * 1024;

#[derive(Args, Debug)]
#[command(
    after_help = "The first line is a header: {\"veil_export\": 1, \"queue\", \"fifo\", \"settings\"}.\nEach other line: {\"id\", \"body_base64\", \"attributes\", \"group\", \"dedup_id\", \"sent_at_ms\", \"receive_count\"}.\nExport browses: no message is received, hidden or counted.\n\nExamples:\n  veil export orders > orders.jsonl\n  veil export team-a/orders --all-states | gzip > orders.jsonl.gz"
)]
pub struct ExportArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// Also in-flight and delayed messages (only visible ones otherwise).
    #[arg(long)]
    all_states: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Reads JSON Lines as `veil export` writes them (body_base64 required; attributes, group, dedup_id,\ndelay_s, ttl_s optional; other fields are ignored; the export's header line is not a message) and sends them\nin batches of at most 1000.\nIds are NOT kept: the server assigns each imported message a new id (and seq); receive counts restart at 0.\n\nExamples:\n  veil export orders > orders.jsonl && veil import orders-copy --create < orders.jsonl\n  veil export orders | veil --endpoint http://other:9325 import orders"
)]
pub struct ImportArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// Create the queue when it does not exist, as a FIFO queue or not and with the settings of the export's
    /// header line (the defaults when the input has none). An existing queue is imported into as it is.
    #[arg(long)]
    create: bool,
}

/// The first line of an export: what `import --create` needs to make a queue like the source.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    /// The export format's version; its presence is what marks the line as a header.
    veil_export: u32,
    /// `namespace/name` of the source.
    queue: String,
    fifo: bool,
    /// The source's settings as `GET /queues/{ns}/{q}` gives them (the shape `POST /queues` takes).
    settings: Value,
}

/// The version `veil_export` carries in the headers this CLI writes.
const EXPORT_FORMAT_VERSION: u32 = 1;

/// One exported message.
#[derive(Debug, Serialize)]
struct ExportLine<'a> {
    id: &'a str,
    body_base64: &'a str,
    attributes: &'a std::collections::BTreeMap<String, Value>,
    group: Option<&'a str>,
    dedup_id: Option<&'a str>,
    sent_at_ms: u64,
    receive_count: u32,
}

/// One message to import: what an export line carries that a send can use.
#[derive(Debug, Deserialize)]
struct ImportLine {
    body_base64: String,
    #[serde(default)]
    attributes: Map<String, Value>,
    group: Option<String>,
    dedup_id: Option<String>,
    delay_s: Option<u64>,
    ttl_s: Option<u64>,
}

pub fn export(context: &Context, args: ExportArgs) -> Result<(), CliError> {
    let detail = context.client.get(&queue_path(&args.queue, ""), &[])?;
    let stored = stored_count(&detail);
    let bar = progress_bar(stored, &format!("exporting {}", args.queue));
    let mut out = BufWriter::new(std::io::stdout().lock());
    let header = Header {
        veil_export: EXPORT_FORMAT_VERSION,
        queue: args.queue.to_string(),
        fifo: detail["queue"]["fifo"].as_bool().unwrap_or(false),
        settings: detail["settings"].clone(),
    };
    serde_json::to_writer(&mut out, &header).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    let mut from_seq = 0u64;
    let mut written = 0u64;
    loop {
        let answer = browse_page(context, &args.queue, from_seq, EXPORT_PAGE)?;
        let page: ViewList = typed(&answer)?;
        let Some(last) = page.messages.last().map(|m| m.seq) else {
            break;
        };
        for m in page
            .messages
            .iter()
            .filter(|m| args.all_states || m.state == "visible")
        {
            let line = ExportLine {
                id: &m.id,
                body_base64: &m.body_base64,
                attributes: &m.attributes,
                group: m.group.as_deref(),
                dedup_id: m.dedup_id.as_deref(),
                sent_at_ms: m.sent_at_ms,
                receive_count: m.receive_count,
            };
            serde_json::to_writer(&mut out, &line).map_err(std::io::Error::from)?;
            out.write_all(b"\n")?;
            written += 1;
        }
        bar.inc(page.messages.len() as u64);
        from_seq = last + 1;
    }
    out.flush()?;
    bar.finish_and_clear();
    eprintln!("exported {written} messages from {}", args.queue);
    Ok(())
}

/// Every stored message of a queue's detail, for the progress bar's length.
fn stored_count(detail: &Value) -> u64 {
    let count = |field: &str| detail["queue"][field].as_u64().unwrap_or(0);
    count("visible") + count("inflight") + count("delayed")
}

pub fn import(context: &Context, args: ImportArgs) -> Result<(), CliError> {
    let stdin = std::io::stdin();
    let bar = import_bar(&stdin, &args.queue);
    let mut batch = Batch::default();
    let mut sent = Vec::new();
    let mut lines = stdin.lock().lines().enumerate().peekable();
    let header = match lines.peek() {
        Some((_, Ok(first))) => header_of(first),
        _ => None,
    };
    if header.is_some() {
        if let Some((_, Ok(line))) = lines.next() {
            bar.inc(line.len() as u64 + 1);
        }
    }
    if args.create {
        create_if_missing(context, &args.queue, header.as_ref())?;
    }
    for (index, line) in lines {
        let line = line?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let message = parse_line(&line, index + 1, sent.len())?;
        batch.push(message, line.len());
        if batch.is_full() {
            sent.extend(send_batch(context, &args.queue, batch.take())?);
        }
    }
    if !batch.messages.is_empty() {
        sent.extend(send_batch(context, &args.queue, batch.take())?);
    }
    bar.finish_and_clear();
    let count = sent.len();
    let answer = json!({ "sent": sent });
    context.output.print(&answer, || {
        Ok(format!(
            "imported {count} messages into {} (new ids)",
            args.queue
        ))
    })
}

/// The export header a line is, if it is one (a JSON object with `veil_export`).
fn header_of(line: &str) -> Option<Header> {
    serde_json::from_str::<Header>(line).ok()
}

/// `import --create`: makes the queue like the export's source unless it exists. A queue made meanwhile by
/// someone else is fine too: the import goes into it.
fn create_if_missing(
    context: &Context,
    queue: &QueueArg,
    header: Option<&Header>,
) -> Result<(), CliError> {
    match context.client.get(&queue_path(queue, ""), &[]) {
        Ok(_) => {
            eprintln!("{queue} exists: importing into it as it is");
            return Ok(());
        }
        Err(CliError::Api { code, .. }) if code == "QueueNotFound" => {}
        Err(other) => return Err(other),
    }
    let (fifo, settings) = header.map_or((false, json!({})), |h| (h.fifo, h.settings.clone()));
    match context.client.post(
        "/queues",
        &json!({ "namespace": queue.namespace, "name": queue.name, "fifo": fifo, "settings": settings }),
    ) {
        Ok(_) => {
            match header {
                Some(h) => eprintln!("created {queue} with the settings of {}", h.queue),
                None => eprintln!("created {queue} with the default settings (the input has no export header)"),
            }
            Ok(())
        }
        Err(CliError::Api { code, .. }) if code == "QueueExists" => Ok(()),
        Err(other) => Err(other),
    }
}

/// Bytes of stdin when it is a file of known size, else a spinner counting bytes.
fn import_bar(stdin: &std::io::Stdin, queue: &QueueArg) -> ProgressBar {
    let size = stdin_file_size(stdin);
    let message = format!("importing into {queue}");
    match size {
        Some(size) => {
            let bar = progress_bar(size, &message);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        }
        None => {
            let bar = ProgressBar::with_draw_target(None, draw_target());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {bytes} read") {
                bar.set_style(style);
            }
            bar.set_message(message);
            bar
        }
    }
}

/// The size of stdin when it is redirected from a regular file (`< file.jsonl`).
fn stdin_file_size(stdin: &std::io::Stdin) -> Option<u64> {
    if stdin.is_terminal() {
        return None;
    }
    let metadata = std::fs::metadata("/dev/stdin").ok()?;
    let kind = metadata.file_type();
    (kind.is_file() && !kind.is_fifo()).then_some(metadata.len())
}

fn parse_line(line: &str, number: usize, imported: usize) -> Result<Value, CliError> {
    let parsed: ImportLine = serde_json::from_str(line).map_err(|error| {
        CliError::Usage(format!(
            "line {number} is not an export line: {error} ({imported} messages were imported before it)"
        ))
    })?;
    Ok(json!({
        "body_base64": parsed.body_base64,
        "attributes": parsed.attributes,
        "group": parsed.group,
        "dedup_id": parsed.dedup_id,
        "delay_s": parsed.delay_s,
        "ttl_s": parsed.ttl_s,
    }))
}

/// Messages waiting to be sent together.
#[derive(Default)]
struct Batch {
    messages: Vec<Value>,
    bytes: usize,
}

impl Batch {
    fn push(&mut self, message: Value, bytes: usize) {
        self.messages.push(message);
        self.bytes += bytes;
    }

    fn is_full(&self) -> bool {
        self.messages.len() >= IMPORT_BATCH_MESSAGES || self.bytes >= IMPORT_BATCH_BYTES
    }

    fn take(&mut self) -> Vec<Value> {
        self.bytes = 0;
        std::mem::take(&mut self.messages)
    }
}

fn send_batch(
    context: &Context,
    queue: &QueueArg,
    messages: Vec<Value>,
) -> Result<Vec<Value>, CliError> {
    let answer = context.client.post(
        &queue_path(queue, "/messages"),
        &json!({ "messages": messages }),
    )?;
    match answer.get("sent").and_then(Value::as_array) {
        Some(sent) => Ok(sent.clone()),
        None => Err(CliError::BadAnswer("no \"sent\" in the send answer".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_line_imports_without_its_id() {
        let line = r#"{"id":"x","body_base64":"aGk=","attributes":{"k":{"data_type":"String","string_value":"v"}},"group":"g","dedup_id":null,"sent_at_ms":1,"receive_count":2}"#;
        let message = parse_line(line, 1, 0).unwrap();
        assert_eq!(message["body_base64"], "aGk=");
        assert_eq!(message["group"], "g");
        assert_eq!(message["attributes"]["k"]["string_value"], "v");
        assert!(message.get("id").is_none());
    }

    #[test]
    fn only_the_export_header_is_a_header() {
        let header = Header {
            veil_export: EXPORT_FORMAT_VERSION,
            queue: "default/orders.fifo".into(),
            fifo: true,
            settings: json!({"visibility_timeout_s": 45}),
        };
        let line = serde_json::to_string(&header).unwrap();
        let read = header_of(&line).expect("the header line");
        assert!(read.fifo && read.settings["visibility_timeout_s"] == 45);
        let message = r#"{"id":"x","body_base64":"aGk=","attributes":{},"group":null,"dedup_id":null,"sent_at_ms":1,"receive_count":0}"#;
        assert!(header_of(message).is_none());
    }

    #[test]
    fn a_line_without_body_is_a_usage_error() {
        let error = parse_line(r#"{"id":"x"}"#, 3, 7).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("line 3"));
    }

    #[test]
    fn a_batch_is_full_at_1000_messages() {
        let mut batch = Batch::default();
        for _ in 0..999 {
            batch.push(json!({}), 10);
        }
        assert!(!batch.is_full());
        batch.push(json!({}), 10);
        assert!(batch.is_full());
        assert_eq!(batch.take().len(), 1000);
        assert!(batch.messages.is_empty());
    }
}
