//! `veil messages`: send, peek (changes nothing), receive (a real delivery: prints receipts), delete by
//! seq/id or by receipt, update a delivery's visibility, and a message's delivery history.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;

use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use serde::Deserialize;
use serde_json::{json, Value};

use super::client::{queue_path, segment, typed};
use super::output::{body_cell, or_dash, timestamp, Table};
use super::queues::Ref;
use super::{CliError, Context, QueueArg};

/// Table cells show this much of a body; `--output json` has all of it.
const BODY_CELL_CHARS: usize = 60;

#[derive(Subcommand, Debug)]
pub enum MessagesCommand {
    /// Send one message: BODY, or the bytes of --file.
    #[command(
        after_help = "Examples:\n  veil messages send orders 'hello'\n  veil messages send orders --file order.json --attribute type=String:order --attribute n=Number:3\n  veil messages send orders.fifo 'x' --group g1 --dedup-id d1"
    )]
    Send(SendArgs),
    /// Show the next messages a receive would get (or every stored one with --all); changes nothing.
    #[command(
        after_help = "Peeking issues no receipt, counts no receive and hides nothing.\n\nExamples:\n  veil messages peek orders\n  veil messages peek orders --all --max 100\n  veil messages peek orders --all --max 100 --from-seq 100   # the next page\n  veil --output json messages peek orders | jq -r '.messages[].body'"
    )]
    Peek(PeekArgs),
    /// Receive like a consumer: hides the messages for the visibility timeout and prints their receipts.
    #[command(
        after_help = "Examples:\n  veil messages receive orders --max 10 --visibility-timeout 60\n  veil --output json messages receive orders --wait 20 | jq -r '.messages[0].receipt'"
    )]
    Receive(ReceiveArgs),
    /// Delete one message by its seq or id (any state), or one delivery by its --receipt.
    #[command(
        after_help = "Examples:\n  veil messages delete orders 12\n  veil messages delete orders 6f1c2a7e-0c9b-4c1e-9a55-1f2b3c4d5e6f\n  veil messages delete orders --receipt \"$RECEIPT\""
    )]
    Delete(DeleteArgs),
    /// Change a received message's visibility timeout (0 makes it visible again now).
    #[command(
        after_help = "Examples:\n  veil messages update orders --receipt \"$RECEIPT\" --visibility-timeout 300\n  veil messages update orders --receipt \"$RECEIPT\" --visibility-timeout 0"
    )]
    Update(UpdateArgs),
    /// A message's deliveries: when, by which protocol and client, and how each ended.
    #[command(
        after_help = "Examples:\n  veil messages history orders 12\n  veil --output json messages history orders 6f1c2a7e-0c9b-4c1e-9a55-1f2b3c4d5e6f"
    )]
    History(MessageRef),
    /// Print messages as they arrive, without receiving them (a browse, like kubemqctl's attach).
    Tail(super::tail::TailArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("content").required(true).args(["body", "file"])))]
pub struct SendArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// The body, as text.
    body: Option<String>,
    /// Send this file's bytes as the body.
    #[arg(long, value_name = "F")]
    file: Option<PathBuf>,
    /// A message attribute, `name=Type:value`; Type is String, Number or Binary (value in base64),
    /// optionally with a `.custom` suffix. Repeatable.
    #[arg(long = "attribute", value_name = "NAME=TYPE:VALUE")]
    attributes: Vec<AttributeArg>,
    /// Seconds before it can be received.
    #[arg(long, value_name = "S")]
    delay: Option<u64>,
    /// The message group (required by FIFO queues).
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// The deduplication id (FIFO queues).
    #[arg(long, value_name = "D")]
    dedup_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct PeekArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    max: u16,
    /// Every stored message in sequence order, in-flight and delayed ones included, a page of --max at a
    /// time: a full page prints the --from-seq of the next one.
    #[arg(long)]
    all: bool,
    /// With --all: start at this sequence number (the `next_from_seq` a full page printed).
    #[arg(long, value_name = "SEQ", requires = "all")]
    from_seq: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ReceiveArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// At most this many.
    #[arg(long, default_value_t = 1)]
    max: usize,
    /// Seconds the messages stay hidden (the queue's setting when not given).
    #[arg(long, value_name = "S")]
    visibility_timeout: Option<u64>,
    /// Seconds to wait for a message when none is there (long poll, at most 20).
    #[arg(long, value_name = "S")]
    wait: Option<u64>,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").required(true).args(["message", "receipt"])))]
pub struct DeleteArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// The message's seq or id.
    message: Option<String>,
    /// Delete the delivery this receipt (from a receive) names.
    #[arg(long, value_name = "R")]
    receipt: Option<String>,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// The receipt of the delivery to change.
    #[arg(long, value_name = "R")]
    receipt: String,
    /// Hidden for this many seconds from now.
    #[arg(long, value_name = "S")]
    visibility_timeout: u64,
}

#[derive(Args, Debug)]
pub struct MessageRef {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// The message's seq or id.
    message: String,
}

/// `--attribute name=Type:value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeArg {
    name: String,
    data_type: String,
    value: String,
}

impl FromStr for AttributeArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{text:?} is not name=Type:value (e.g. kind=String:order)");
        let (name, rest) = text.split_once('=').ok_or_else(bad)?;
        let (data_type, value) = rest.split_once(':').ok_or_else(bad)?;
        let base = data_type.split('.').next().unwrap_or_default();
        if name.is_empty() || !matches!(base, "String" | "Number" | "Binary") {
            return Err(bad());
        }
        if base == "Binary" && super::b64().decode(value).is_err() {
            return Err(format!("the Binary value of {name:?} is not base64"));
        }
        Ok(Self {
            name: name.to_owned(),
            data_type: data_type.to_owned(),
            value: value.to_owned(),
        })
    }
}

impl AttributeArg {
    /// The API's attribute shape.
    fn to_json(&self) -> Value {
        if self.data_type.starts_with("Binary") {
            json!({ "data_type": self.data_type, "binary_value_base64": self.value })
        } else {
            json!({ "data_type": self.data_type, "string_value": self.value })
        }
    }
}

pub fn run(context: &Context, command: MessagesCommand) -> Result<(), CliError> {
    match command {
        MessagesCommand::Send(args) => send(context, args),
        MessagesCommand::Peek(args) => peek(context, args),
        MessagesCommand::Receive(args) => receive(context, args),
        MessagesCommand::Delete(args) => delete(context, args),
        MessagesCommand::Update(args) => update(context, args),
        MessagesCommand::History(args) => history(context, args),
        MessagesCommand::Tail(args) => super::tail::run(context, args),
    }
}

fn send(context: &Context, args: SendArgs) -> Result<(), CliError> {
    let mut message = json!({
        "attributes": args.attributes.iter().map(|a| (a.name.clone(), a.to_json())).collect::<BTreeMap<_, _>>(),
        "delay_s": args.delay,
        "group": args.group,
        "dedup_id": args.dedup_id,
    });
    match (&args.body, &args.file) {
        (Some(body), _) => message["body"] = json!(body),
        (None, Some(file)) => {
            let bytes = std::fs::read(file).map_err(|error| {
                CliError::Usage(format!("cannot read {}: {error}", file.display()))
            })?;
            // base64 carries the file's exact bytes, text or not.
            message["body_base64"] = json!(super::b64().encode(bytes));
        }
        (None, None) => return Err(CliError::Usage("give a BODY or --file".into())),
    }
    let answer = context.client.post(
        &queue_path(&args.queue, "/messages"),
        &json!({ "messages": [message] }),
    )?;
    context.output.print(&answer, || {
        let sent: SentList = typed(&answer)?;
        let mut table = Table::new(&["SEQ", "ID"]);
        for s in sent.sent {
            table.row(vec![s.seq.to_string(), s.id]);
        }
        Ok(table.render())
    })
}

#[derive(Debug, Deserialize)]
struct SentList {
    sent: Vec<SentOne>,
}

#[derive(Debug, Deserialize)]
struct SentOne {
    id: String,
    seq: u64,
}

/// A message as browse, peek and receive give it (what tables show of it).
#[derive(Debug, Deserialize)]
pub struct View {
    pub id: String,
    pub seq: u64,
    pub state: String,
    pub body: Option<String>,
    pub body_base64: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, Value>,
    pub receive_count: u32,
    pub sent_at_ms: u64,
    pub group: Option<String>,
    pub dedup_id: Option<String>,
    pub receipt: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ViewList {
    pub messages: Vec<View>,
}

/// One page of a browse (`state=all`): every stored message from `from_seq` on, at most `max`, changing
/// nothing. `export` and `messages tail` read a queue this way.
pub fn browse_page(
    context: &Context,
    queue: &QueueArg,
    from_seq: u64,
    max: usize,
) -> Result<Value, CliError> {
    context.client.get(
        &queue_path(queue, "/messages"),
        &[
            ("state", "all".to_owned()),
            ("from_seq", from_seq.to_string()),
            ("max", max.to_string()),
        ],
    )
}

fn peek(context: &Context, args: PeekArgs) -> Result<(), CliError> {
    let state = if args.all { "all" } else { "visible" };
    let mut query = vec![("state", state.to_owned()), ("max", args.max.to_string())];
    if let Some(from_seq) = args.from_seq {
        query.push(("from_seq", from_seq.to_string()));
    }
    let answer = context
        .client
        .get(&queue_path(&args.queue, "/messages"), &query)?;
    if let (false, Some(next)) = (
        context.output.is_json(),
        answer.get("next_from_seq").and_then(Value::as_u64),
    ) {
        // On stderr, so the table alone stays on stdout; `--output json` has the cursor in the answer.
        eprintln!(
            "more after this page: veil messages peek {} --all --max {} --from-seq {next}",
            args.queue, args.max
        );
    }
    context.output.print(&answer, || {
        let list: ViewList = typed(&answer)?;
        let mut table = Table::new(&["SEQ", "ID", "STATE", "RECEIVES", "SENT", "BODY"]);
        for m in &list.messages {
            table.row(vec![
                m.seq.to_string(),
                m.id.clone(),
                m.state.clone(),
                m.receive_count.to_string(),
                timestamp(m.sent_at_ms),
                body_cell(m.body.as_deref(), m.body_base64.len(), BODY_CELL_CHARS),
            ]);
        }
        Ok(table.render())
    })
}

fn receive(context: &Context, args: ReceiveArgs) -> Result<(), CliError> {
    let answer = context.client.post(
        &queue_path(&args.queue, "/messages/receive"),
        &json!({
            "max": args.max,
            "visibility_timeout_s": args.visibility_timeout,
            "wait_s": args.wait,
        }),
    )?;
    context.output.print(&answer, || {
        let list: ViewList = typed(&answer)?;
        let mut table = Table::new(&["SEQ", "ID", "RECEIVES", "BODY", "RECEIPT"]);
        for m in &list.messages {
            table.row(vec![
                m.seq.to_string(),
                m.id.clone(),
                m.receive_count.to_string(),
                body_cell(m.body.as_deref(), m.body_base64.len(), BODY_CELL_CHARS),
                or_dash(m.receipt.as_deref()),
            ]);
        }
        Ok(table.render())
    })
}

fn delete(context: &Context, args: DeleteArgs) -> Result<(), CliError> {
    let answer = match (&args.message, &args.receipt) {
        (_, Some(receipt)) => context.client.post(
            &queue_path(&args.queue, "/messages/ack"),
            &json!({ "receipt": receipt }),
        )?,
        (Some(message), None) => context.client.delete(&queue_path(
            &args.queue,
            &format!("/messages/{}", segment(message)),
        ))?,
        (None, None) => {
            return Err(CliError::Usage(
                "give the message's seq or id, or --receipt".into(),
            ))
        }
    };
    context.output.print(&answer, || {
        let deleted = answer
            .get("deleted")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(if deleted {
            "deleted".to_owned()
        } else {
            // An ack of a delivery whose message is already gone: nothing was left to delete.
            "nothing to delete (already deleted)".to_owned()
        })
    })
}

fn update(context: &Context, args: UpdateArgs) -> Result<(), CliError> {
    let answer = context.client.post(
        &queue_path(&args.queue, "/messages/visibility"),
        &json!({ "receipt": args.receipt, "visibility_timeout_s": args.visibility_timeout }),
    )?;
    context.output.print(&answer, || {
        let at = answer
            .get("visible_at_ms")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        Ok(format!("visible again at {}", timestamp(at)))
    })
}

/// `GET .../messages/{message}/history`.
#[derive(Debug, Deserialize)]
struct History {
    id: String,
    seq: u64,
    deliveries: Vec<Delivery>,
}

#[derive(Debug, Deserialize)]
struct Delivery {
    received_at_ms: u64,
    receive_count: u32,
    protocol: String,
    client: Option<String>,
    identity: Option<String>,
    visibility_timeout_ms: u64,
    ended: Ended,
}

#[derive(Debug, Deserialize)]
struct Ended {
    how: String,
    at_ms: Option<u64>,
    to: Option<Ref>,
}

fn history(context: &Context, args: MessageRef) -> Result<(), CliError> {
    let path = format!("/messages/{}/history", segment(&args.message));
    let answer = context.client.get(&queue_path(&args.queue, &path), &[])?;
    context
        .output
        .print(&answer, || Ok(history_text(&typed::<History>(&answer)?)))
}

fn history_text(history: &History) -> String {
    let mut table = Table::new(&[
        "#",
        "RECEIVED",
        "PROTOCOL",
        "CLIENT",
        "IDENTITY",
        "VISIBILITY",
        "ENDED",
        "AT",
        "TO",
    ]);
    for d in &history.deliveries {
        table.row(vec![
            d.receive_count.to_string(),
            timestamp(d.received_at_ms),
            d.protocol.clone(),
            or_dash(d.client.as_deref()),
            or_dash(d.identity.as_deref()),
            format!("{}s", d.visibility_timeout_ms / 1000),
            d.ended.how.clone(),
            d.ended.at_ms.map_or("-".to_owned(), timestamp),
            d.ended
                .to
                .as_ref()
                .map_or("-".to_owned(), ToString::to_string),
        ]);
    }
    format!(
        "message {} (seq {}): {} deliveries\n{}",
        history.id,
        history.seq,
        history.deliveries.len(),
        table.render()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_parse_name_type_value() {
        let attribute: AttributeArg = "kind=String:a:b=c".parse().unwrap();
        assert_eq!(attribute.name, "kind");
        assert_eq!(attribute.data_type, "String");
        assert_eq!(attribute.value, "a:b=c");
        let custom: AttributeArg = "n=Number.float:1.5".parse().unwrap();
        assert_eq!(custom.data_type, "Number.float");
        assert!("b=Binary:aGk=".parse::<AttributeArg>().is_ok());
    }

    #[test]
    fn malformed_attributes_are_refused() {
        for bad in ["kind", "kind=order", "=String:x", "k=Text:x", "b=Binary:!!"] {
            assert!(bad.parse::<AttributeArg>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn history_renders_one_row_per_delivery() {
        let history: History = serde_json::from_value(json!({
            "id": "6f1c2a7e-0c9b-4c1e-9a55-1f2b3c4d5e6f", "seq": 12,
            "deliveries": [{
                "received_at_ms": 0, "receive_count": 1, "protocol": "sqs", "client": "127.0.0.1:5555",
                "identity": null, "visibility_timeout_ms": 30000,
                "ended": {"how": "dead_lettered", "at_ms": 1000, "visibility_timeout_ms": null,
                          "to": {"namespace": "default", "name": "dlq"}}
            }]
        }))
        .unwrap();
        let text = history_text(&history);
        assert!(text
            .starts_with("message 6f1c2a7e-0c9b-4c1e-9a55-1f2b3c4d5e6f (seq 12): 1 deliveries\n"));
        assert!(text.contains("sqs"), "{text}");
        assert!(
            text.contains("dead_lettered  1970-01-01T00:00:01.000Z  default/dlq"),
            "{text}"
        );
    }
}
