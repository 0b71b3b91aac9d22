//! Delivery histories in the durable store (docs/semantics.md §9): written with the receive, replayed from the log after a
//! crash, checkpointed into redb, and deleted with their message.

use std::sync::Arc;
use std::time::Duration;

use veil_core::{
    Consumer, DeliveryHistory, Engine, ManualClock, NewMessage, Protocol, QueueConfig, QueueKey,
    ReceiptKey, ReceiptRule, ReceiveOptions, Store, DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;

fn engine_on(store: Arc<RedbStore>, clock: &ManualClock) -> Engine {
    Engine::open(store, Arc::new(clock.clone()), ReceiptKey::new([3; 32])).expect("engine opens")
}

fn orders() -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, "orders")
}

fn receive_one() -> ReceiveOptions {
    ReceiveOptions {
        visibility_ms: Some(60_000),
        wait_ms: Some(0),
        consumer: Some(Consumer::new(
            Protocol::Kubemq,
            None,
            Some("worker-1".into()),
        )),
        ..ReceiveOptions::new(1)
    }
}

fn stored_histories(store: &RedbStore) -> Vec<DeliveryHistory> {
    let mut histories = Vec::new();
    store
        .load_history(&mut |_, _, history| histories.push(history))
        .unwrap();
    histories
}

#[tokio::test]
async fn a_history_survives_a_crash_and_a_checkpoint_and_goes_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let open = || Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let (kept, deleted, receipt);
    {
        let store = open();
        let engine = engine_on(store.clone(), &clock);
        engine
            .create_queue(orders(), QueueConfig::default())
            .await
            .unwrap();
        let sent = engine
            .send(&orders(), vec![NewMessage::new("a"), NewMessage::new("b")])
            .await
            .unwrap();
        (kept, deleted) = (sent[0].message_id, sent[1].message_id);
        engine.receive(&orders(), receive_one()).await.unwrap();
        clock.advance(Duration::from_secs(1));
        let second = engine.receive(&orders(), receive_one()).await.unwrap();
        receipt = second[0].receipt.clone().unwrap();
        // A crash: nothing is checkpointed; the histories are only in the log.
        store.abandon();
    }
    {
        let store = open();
        assert_eq!(stored_histories(&store).len(), 2, "replayed from the log");
        let engine = engine_on(store.clone(), &clock);
        let history = engine.history(&orders(), &kept).unwrap().expect("kept");
        assert_eq!(history.deliveries.len(), 1);
        assert_eq!(history.deliveries[0].received_at, START_MS);
        assert_eq!(
            history.deliveries[0]
                .consumer
                .as_ref()
                .and_then(|c| c.identity.as_deref()),
            Some("worker-1")
        );
        assert_eq!(history.in_flight_until, Some(START_MS + 60_000));
        store.checkpoint_now().unwrap();
        engine
            .delete(&orders(), &receipt, ReceiptRule::Current)
            .await
            .unwrap();
        store.close();
    }
    let store = open();
    assert_eq!(
        stored_histories(&store).len(),
        1,
        "the deleted message's history went with it"
    );
    let engine = engine_on(store.clone(), &clock);
    assert!(engine.history(&orders(), &kept).unwrap().is_some());
    assert!(engine.history(&orders(), &deleted).unwrap().is_none());
    store.close();
}

#[tokio::test]
async fn a_message_born_and_deleted_within_one_checkpoint_leaves_no_history() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = engine_on(store.clone(), &clock);
    engine
        .create_queue(orders(), QueueConfig::default())
        .await
        .unwrap();
    engine
        .send(&orders(), vec![NewMessage::new("short")])
        .await
        .unwrap();
    let got = engine.receive(&orders(), receive_one()).await.unwrap();
    engine
        .delete(
            &orders(),
            got[0].receipt.as_deref().unwrap(),
            ReceiptRule::Current,
        )
        .await
        .unwrap();
    store.checkpoint_now().unwrap();
    assert!(stored_histories(&store).is_empty());
    // Purged and deleted queues take their histories along too.
    engine
        .send(&orders(), vec![NewMessage::new("purged")])
        .await
        .unwrap();
    engine.receive(&orders(), receive_one()).await.unwrap();
    store.checkpoint_now().unwrap();
    assert_eq!(stored_histories(&store).len(), 1);
    engine.purge(&orders(), None).await.unwrap();
    store.checkpoint_now().unwrap();
    assert!(stored_histories(&store).is_empty());
    store.close();
}
