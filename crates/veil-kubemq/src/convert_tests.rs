//! Conversion rules on structs: validation with KubeMQ's texts, policy and time conversions, the reserved
//! attributes that carry KubeMQ fields, and the rendering of delivered messages.

use super::*;
use veil_core::{MessageState, MoveReason, MovedFrom, Payload, QueueKey};

fn wire(channel: &str, body: &[u8]) -> pb::QueueMessage {
    pb::QueueMessage {
        message_id: "m-1".into(),
        client_id: "client".into(),
        channel: channel.into(),
        body: body.to_vec().into(),
        ..Default::default()
    }
}

fn policy(expiration: i32, delay: i32, count: i32, queue: &str) -> Option<pb::QueueMessagePolicy> {
    Some(pb::QueueMessagePolicy {
        expiration_seconds: expiration,
        delay_seconds: delay,
        max_receive_count: count,
        max_receive_queue: queue.into(),
    })
}

fn stored(new: NewMessage, seq: u64, state: MessageState) -> Message {
    Message {
        seq,
        payload: Payload {
            message_id: [7; 16],
            body_md5: veil_core::body_md5(&new.body),
            body: new.body,
            attributes: new.attributes,
            sent_at: state.sent_at,
            sender_id: new.sender_id,
            moved_from: new.moved_from,
            group: new.group,
            dedup_id: new.dedup_id,
        },
        state,
        receipt: Some("r".into()),
        redrive: new.redrive,
    }
}

fn state(receive_count: u32) -> MessageState {
    MessageState {
        sent_at: 1_000,
        visible_at: 1_000,
        expires_at: NEVER,
        first_received_at: if receive_count > 0 { 1_000 } else { 0 },
        receive_count,
        generation: receive_count,
        body_bytes: 1,
        dead_letter_on_release: false,
    }
}

#[test]
fn client_id_is_required() {
    let mut message = wire("orders", b"x");
    message.client_id.clear();
    assert_eq!(
        validate_message(&message, &Settings::default()),
        Err(KubemqError::ClientIdMissing)
    );
}

#[test]
fn a_client_id_past_its_bound_or_with_a_control_character_is_refused() {
    let refused = Err(KubemqError::ClientIdInvalid {
        max_bytes: limits::CLIENT_ID_BYTES_MAX,
    });
    for bad in [
        "c".repeat(limits::CLIENT_ID_BYTES_MAX + 1),
        "nul\0".into(),
        "new\nline".into(),
    ] {
        let mut message = wire("q", b"x");
        message.client_id = bad;
        assert_eq!(validate_message(&message, &Settings::default()), refused);
    }
    let mut message = wire("q", b"x");
    message.client_id = "c".repeat(limits::CLIENT_ID_BYTES_MAX);
    assert_eq!(validate_message(&message, &Settings::default()), Ok(()));
}

#[test]
fn channel_may_not_be_empty_contain_spaces_wildcards_or_end_with_a_dot() {
    for bad in ["", "a b", "a\tb", "a*", "a>", "orders."] {
        assert_eq!(
            validate_channel(bad),
            Err(KubemqError::QueueNameInvalid),
            "{bad:?}"
        );
    }
    assert_eq!(validate_channel("queues.tasks-1_x"), Ok(()));
    assert_eq!(
        KubemqError::QueueNameInvalid.to_string(),
        "Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot"
    );
}

#[test]
fn channel_names_are_bounded_to_kubemq_sdk_length() {
    let longest = "a".repeat(limits::CHANNEL_NAME_BYTES_MAX);
    assert_eq!(validate_channel(&longest), Ok(()));
    let longer = "a".repeat(limits::CHANNEL_NAME_BYTES_MAX + 1);
    assert_eq!(
        validate_channel(&longer),
        Err(KubemqError::QueueNameInvalid)
    );
    let huge = "a".repeat(3 * 1024 * 1024);
    assert_eq!(validate_channel(&huge), Err(KubemqError::QueueNameInvalid));
}

#[test]
fn channel_names_use_kubemq_sdk_characters_only() {
    // KubeMQ's hierarchies ('.') and paths ('/') stay legal; such channels are KubeMQ's alone.
    for good in [
        "orders.eu",
        "a/b",
        "tenant/orders.v2",
        "A-Z_09",
        "jobs.fifo",
        "a/../b",
    ] {
        assert_eq!(validate_channel(good), Ok(()), "{good:?}");
    }
    // Right-to-left override, other non-ASCII, control characters, a leading dot (KubeMQ's documentation).
    for bad in [
        "orders\u{202e}txt",
        "caf\u{e9}",
        "a\u{0}b",
        "a@b",
        "a#b",
        "a%2Fb",
        "../etc",
        ".hidden",
    ] {
        assert_eq!(
            validate_channel(bad),
            Err(KubemqError::QueueNameInvalid),
            "{bad:?}"
        );
    }
}

#[test]
fn a_dead_letter_channel_follows_the_same_name_rules() {
    let mut message = wire("orders", b"x");
    message.policy = policy(0, 0, 3, &"d".repeat(limits::CHANNEL_NAME_BYTES_MAX + 1));
    assert_eq!(validate_names(&message), Err(KubemqError::QueueNameInvalid));
    assert_eq!(
        validate_message(&message, &Settings::default()),
        Err(KubemqError::QueueNameInvalid)
    );
    message.policy = policy(0, 0, 3, "orders.dead");
    assert_eq!(validate_names(&message), Ok(()));
    assert_eq!(dead_letter_channel(&message), Some("orders.dead"));
    message.policy = policy(0, 0, 3, "");
    assert_eq!(dead_letter_channel(&message), None);
}

#[test]
fn tags_are_bounded_in_count_key_and_value_bytes() {
    let settings = Settings::default();
    let mut message = wire("q", b"x");
    for i in 0..limits::MESSAGE_TAGS_MAX {
        message
            .tags
            .insert(format!("k{i}"), "v".repeat(limits::TAG_VALUE_BYTES_MAX));
    }
    assert_eq!(validate_message(&message, &settings), Ok(()));
    message.tags.insert("one-more".into(), "v".into());
    assert_eq!(
        validate_message(&message, &settings),
        Err(KubemqError::TooManyTags { max: 10 })
    );
    let one = |key: String, value: String| {
        let mut message = wire("q", b"x");
        message.tags.insert(key, value);
        validate_message(&message, &settings)
    };
    assert_eq!(
        one(String::new(), "v".into()),
        Err(KubemqError::TagKeyInvalid { max_bytes: 256 })
    );
    assert_eq!(
        one("k".repeat(limits::TAG_KEY_BYTES_MAX + 1), "v".into()),
        Err(KubemqError::TagKeyInvalid { max_bytes: 256 })
    );
    assert_eq!(
        one("k".into(), "v".repeat(limits::TAG_VALUE_BYTES_MAX + 1)),
        Err(KubemqError::TagValueTooLong { max_bytes: 4_096 })
    );
    assert_eq!(
        KubemqError::TooManyTags { max: 10 }.to_string(),
        "Error 400: invalid tags, a message may carry at most 10 tags"
    );
}

#[test]
fn metadata_or_body_must_be_present() {
    let settings = Settings::default();
    assert_eq!(
        validate_message(&wire("q", b""), &settings),
        Err(KubemqError::MessageEmpty)
    );
    let mut with_metadata = wire("q", b"");
    with_metadata.metadata = "only metadata".into();
    assert_eq!(validate_message(&with_metadata, &settings), Ok(()));
}

#[test]
fn policy_values_must_lie_within_the_server_settings() {
    let settings = Settings::default();
    let mut message = wire("q", b"x");
    message.policy = policy(43_201, 0, 0, "");
    assert_eq!(
        validate_message(&message, &settings),
        Err(KubemqError::ExpirationOutOfRange { max: 43_200 })
    );
    message.policy = policy(0, -1, 0, "");
    assert_eq!(
        validate_message(&message, &settings),
        Err(KubemqError::DelayOutOfRange { max: 43_200 })
    );
    message.policy = policy(0, 0, 1_025, "");
    assert_eq!(
        validate_message(&message, &settings),
        Err(KubemqError::MaxReceiveCountOutOfRange { max: 1_024 })
    );
    message.policy = policy(43_200, 43_200, 1_024, "dead");
    assert_eq!(validate_message(&message, &settings), Ok(()));
    assert_eq!(
        KubemqError::ExpirationOutOfRange { max: 43_200 }.to_string(),
        "Error 400: invalid expiration seconds, must be between 0 and 43200"
    );
}

#[test]
fn expiration_zero_never_expires_and_expiry_counts_from_the_end_of_the_delay() {
    let mut message = wire("q", b"x");
    message.policy = policy(0, 5, 0, "");
    let new = to_new_message(message.clone());
    assert_eq!(new.ttl, Some(Ttl::Never));
    assert_eq!(new.delay_ms, Some(5_000));
    message.policy = policy(10, 5, 0, "");
    assert_eq!(to_new_message(message).ttl, Some(Ttl::After(15_000)));
}

#[test]
fn tags_become_attributes_and_metadata_id_and_policy_travel_as_reserved_attributes() {
    let mut message = wire("q", b"x");
    message.metadata = "meta".into();
    message.tags.insert("kind".into(), "a".into());
    message
        .tags
        .insert("kubemq.metadata".into(), "spoofed".into());
    message.policy = policy(0, 0, 0, "dead");
    let new = to_new_message(message);
    let text = |name: &str| attribute_text(&new.attributes, name);
    assert_eq!(text("kind").as_deref(), Some("a"));
    assert_eq!(
        text(ATTR_METADATA).as_deref(),
        Some("meta"),
        "a tag cannot overwrite a reserved attribute"
    );
    assert_eq!(text(ATTR_MESSAGE_ID).as_deref(), Some("m-1"));
    assert_eq!(
        new.redrive,
        Some(MessageRedrivePolicy {
            max_receive_count: 1024,
            dead_letter_queue: Some(QueueKey::new(DEFAULT_NAMESPACE, "dead")),
        }),
        "MaxReceiveCount 0 means the maximum; the channel is in the shared namespace"
    );
    assert_eq!(new.sender_id, "client");
}

/// KubeMQ's message counts against the queue's size limit as the data it stores: the body, each tag and
/// reserved attribute's name, type label (`String`) and value, and the sender's ClientID.
#[test]
fn a_message_counts_its_body_tags_reserved_attributes_and_client_id_against_the_size_limit() {
    let mut message = wire("q", b"body");
    message.metadata = "meta".into();
    message.tags.insert("kind".into(), "a".into());
    let string = "String".len();
    let expected = 4
        + ("kind".len() + string + 1)
        + (ATTR_METADATA.len() + string + 4)
        + (ATTR_MESSAGE_ID.len() + string + "m-1".len())
        + "client".len();
    assert_eq!(message.client_id, "client");
    assert_eq!(to_new_message(message).size_bytes, expected);
}

#[test]
fn no_policy_is_stored_when_the_message_sets_none() {
    let mut message = wire("q", b"x");
    message.policy = policy(0, 0, 0, "");
    let new = to_new_message(message);
    assert_eq!(new.redrive, None);
    assert!(to_queue_message(&stored(new, 0, state(1)), "q")
        .policy
        .is_none());
}

#[test]
fn send_result_reports_times_in_unix_nanoseconds_and_zero_for_none() {
    let sent = SentMessage {
        message_id: [1; 16],
        body_md5: [0; 16],
        queue: 1,
        seq: 0,
        sent_at: 2_000,
        visible_at: 3_000,
        expires_at: 13_000,
        duplicate: false,
    };
    let result = send_result(&sent, "", "q");
    assert_eq!(result.sent_at, 2_000_000_000);
    assert_eq!(result.delayed_to, 3_000_000_000);
    assert_eq!(result.expiration_at, 13_000_000_000);
    assert_eq!(
        result.message_id,
        uuid::Uuid::from_bytes([1; 16]).to_string(),
        "generated when empty"
    );
    let never = SentMessage {
        visible_at: 2_000,
        expires_at: NEVER,
        ..sent
    };
    let result = send_result(&never, "mine", "q");
    assert_eq!((result.delayed_to, result.expiration_at), (0, 0));
    assert_eq!(result.message_id, "mine");
}

#[test]
fn wire_sequence_counts_from_one() {
    let message = stored(to_new_message(wire("q", b"x")), 0, state(1));
    let attributes = to_queue_message(&message, "q")
        .attributes
        .unwrap_or_default();
    assert_eq!(attributes.sequence, 1);
    assert_eq!(attributes.receive_count, 1);
    assert_eq!(attributes.timestamp, 1_000_000_000);
}

#[test]
fn a_delivered_message_shows_its_policy() {
    let mut message = wire("q", b"x");
    message.policy = policy(0, 0, 2, "dead");
    let rendered = to_queue_message(&stored(to_new_message(message), 0, state(1)), "q");
    let shown = rendered.policy.unwrap_or_default();
    assert_eq!(shown.max_receive_count, 2);
    assert_eq!(shown.max_receive_queue, "dead");
}

#[test]
fn a_policy_without_a_channel_drops_rather_than_moves() {
    let mut message = wire("q", b"x");
    message.policy = policy(0, 0, 3, "");
    let redrive = to_new_message(message)
        .redrive
        .unwrap_or_else(|| panic!("a policy"));
    assert_eq!(redrive.max_receive_count, 3);
    assert_eq!(redrive.dead_letter_queue, None);
}

#[test]
fn an_engine_dead_letter_source_shows_as_rerouted() {
    let mut message = stored(to_new_message(wire("q", b"x")), 0, state(1));
    message.payload.moved_from = Some(MovedFrom {
        queue: QueueKey::new("default", "orders"),
        reason: MoveReason::DeadLetter,
    });
    let attributes = to_queue_message(&message, "dlq")
        .attributes
        .unwrap_or_default();
    assert!(attributes.re_routed);
    assert_eq!(attributes.re_routed_from_queue, "orders");
}

#[test]
fn a_message_sent_on_behalf_of_another_channel_shows_as_rerouted_from_it_and_not_as_a_tag() {
    let mut new = to_new_message(wire("q", b"x"));
    new.moved_from = Some(MovedFrom {
        queue: QueueKey::new("default", "orders"),
        reason: MoveReason::Requeue,
    });
    let message = to_queue_message(&stored(new, 0, state(1)), "q");
    let attributes = message.attributes.clone().unwrap_or_default();
    assert!(attributes.re_routed);
    assert_eq!(attributes.re_routed_from_queue, "orders");
    assert!(message.tags.is_empty(), "{:?}", message.tags);
}

#[test]
fn a_message_sent_plainly_is_not_rerouted() {
    let message = to_queue_message(&stored(to_new_message(wire("q", b"x")), 0, state(1)), "q");
    let attributes = message.attributes.unwrap_or_default();
    assert!(!attributes.re_routed);
    assert_eq!(attributes.re_routed_from_queue, "");
}

#[test]
fn a_stale_receipt_is_reported_as_no_longer_held() {
    assert_eq!(
        KubemqError::from(EngineError::MessageNotAvailable),
        KubemqError::NotHeld
    );
    assert_eq!(
        KubemqError::from(EngineError::VisibilityPastLimit {
            requested_ms: 1,
            max_ms: 43_200_000
        }),
        KubemqError::VisibilityPastLimit { max_s: 43_200 }
    );
}

#[test]
fn list_channels_reply_has_the_fields_the_sdks_decode_and_filters_by_search() {
    let info = |name: &str, visible: u64| veil_core::QueueInfo {
        id: 1,
        key: QueueKey::new("default", name),
        config: veil_core::QueueConfig::default(),
        created_at: 5,
        modified_at: 6,
        stats: veil_core::QueueStats {
            visible,
            ..Default::default()
        },
    };
    let body = channel_list_json(&[info("orders", 2), info("billing", 0)], "ord");
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("json");
    let list = parsed.as_array().expect("an array");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], "orders");
    assert_eq!(list[0]["type"], "queues");
    assert_eq!(list[0]["isActive"], true);
    assert_eq!(list[0]["outgoing"]["waiting"], 2);
    for key in ["messages", "volume", "waiting", "expired", "delayed"] {
        assert!(list[0]["incoming"].get(key).is_some(), "{key}");
    }
}

#[test]
fn queues_info_filters_by_substring_and_sums_the_kept_channels() {
    let queue = |name: &str, sends: u64, visible: u64, seq_range: Option<(u64, u64)>| {
        veil_core::QueueInfo {
            id: 1,
            key: QueueKey::new(DEFAULT_NAMESPACE, name),
            config: Default::default(),
            created_at: 0,
            modified_at: 0,
            stats: veil_core::QueueStats {
                visible,
                hidden: 1,
                stored_bytes: 10,
                seq_range,
                counters: veil_core::Counters {
                    sends,
                    deliveries: 1,
                    ..Default::default()
                },
                ..Default::default()
            },
        }
    };
    let queues = [
        queue("orders.eu", 5, 3, Some((0, 9))),
        queue("orders.us", 2, 0, None),
        queue("billing", 7, 7, Some((4, 4))),
    ];
    let subscribers = HashMap::from([("orders.us".to_string(), 2)]);
    let info = queues_info(&queues, "orders", &subscribers);
    assert_eq!(info.total_queue, 2);
    assert_eq!((info.sent, info.delivered, info.waiting), (7, 2, 3));
    let eu = &info.queues[0];
    assert_eq!((eu.messages, eu.bytes), (4, 10));
    assert_eq!(
        (eu.first_sequence, eu.last_sequence),
        (1, 10),
        "wire sequences count from 1"
    );
    let us = &info.queues[1];
    assert_eq!(
        (us.first_sequence, us.last_sequence),
        (0, 0),
        "0 when empty"
    );
    assert_eq!(us.subscribers, 2);
    assert_eq!(queues_info(&queues, "", &subscribers).total_queue, 3);
}

#[test]
fn a_callers_error_is_a_400_and_a_stores_says_nothing_of_the_store() {
    let fifo: KubemqError = EngineError::GroupRequired.into();
    assert!(fifo.to_string().starts_with("Error 400: "), "{fifo}");
    let refused: KubemqError = EngineError::InvalidArgument("the client id is empty".into()).into();
    assert_eq!(refused.to_string(), "Error 400: the client id is empty");
    let store: KubemqError =
        EngineError::Store(veil_core::StoreError::Io("db error: SQLSTATE 22021".into())).into();
    assert_eq!(store.to_string(), "Error 500: internal error, retry");
    let unavailable: KubemqError = EngineError::Store(veil_core::StoreError::Unavailable(
        "10.0.0.7:7000 down".into(),
    ))
    .into();
    assert!(
        !unavailable.to_string().contains("10.0.0.7"),
        "{unavailable}"
    );
}

#[test]
fn a_client_id_bound_lets_an_empty_one_through_where_kubemq_does() {
    assert_eq!(validate_client_id_bound(""), Ok(()));
    assert!(validate_client_id_bound(&"c".repeat(limits::CLIENT_ID_BYTES_MAX + 1)).is_err());
    assert!(validate_client_id_bound("a\nb").is_err());
}
