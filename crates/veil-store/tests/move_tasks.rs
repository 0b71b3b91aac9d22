//! Message move tasks on the redb store (docs/semantics.md §8): a running task, its progress and the messages
//! it moved are on disk, so an engine opened again on the same directory continues the task and every message
//! ends up in exactly one queue.

use std::sync::Arc;
use std::time::Duration;

use veil_core::{
    Engine, ManualClock, MoveTaskStatus, NewMessage, QueueConfig, QueueKey, ReceiptKey,
    ReceiveOptions, RedrivePolicy, DEFAULT_NAMESPACE,
};
use veil_store::{RedbStore, StoreOptions};

const START_MS: u64 = 1_700_000_000_000;

fn engine_on(store: Arc<RedbStore>, clock: &ManualClock) -> Engine {
    Engine::open(store, Arc::new(clock.clone()), ReceiptKey::new([3; 32])).expect("engine opens")
}

fn key(name: &str) -> QueueKey {
    QueueKey::new(DEFAULT_NAMESPACE, name)
}

fn receive_all(visibility_ms: u64) -> ReceiveOptions {
    ReceiveOptions {
        visibility_ms: Some(visibility_ms),
        wait_ms: Some(0),
        ..ReceiveOptions::new(100)
    }
}

#[tokio::test]
async fn a_running_task_continues_after_the_store_is_opened_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let (dlq, origin) = (key("dlq"), key("origin"));
    let task_id;
    {
        let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
        let engine = engine_on(store.clone(), &clock);
        engine
            .create_queue(dlq.clone(), QueueConfig::default())
            .await
            .unwrap();
        let config = QueueConfig {
            redrive_policy: Some(RedrivePolicy {
                dead_letter_queue: dlq.clone(),
                max_receive_count: 1,
            }),
            ..QueueConfig::default()
        };
        engine.create_queue(origin.clone(), config).await.unwrap();
        let sends = (0..6).map(|i| NewMessage::new(format!("m{i}"))).collect();
        engine.send(&origin, sends).await.unwrap();
        assert_eq!(
            engine.receive(&origin, receive_all(0)).await.unwrap().len(),
            6
        );
        assert!(engine
            .receive(&origin, receive_all(0))
            .await
            .unwrap()
            .is_empty());

        task_id = engine
            .start_move_task(&dlq, None, Some(2))
            .await
            .unwrap()
            .id;
        engine.drive_move_tasks().await.unwrap();
        clock.advance(Duration::from_secs(1));
        engine.drive_move_tasks().await.unwrap();
        store.close();
    }
    let store = Arc::new(RedbStore::open(dir.path(), StoreOptions::default()).unwrap());
    let engine = engine_on(store, &clock);
    let task = engine.move_tasks(&dlq).unwrap().remove(0);
    assert_eq!(
        (task.id, task.status, task.moved),
        (task_id, MoveTaskStatus::Running, 3)
    );
    assert_eq!(engine.stats(&dlq).unwrap().visible, 3);
    assert_eq!(engine.stats(&origin).unwrap().visible, 3);
    for _ in 0..2 {
        clock.advance(Duration::from_secs(1));
        engine.drive_move_tasks().await.unwrap();
    }

    let task = engine.move_tasks(&dlq).unwrap().remove(0);
    assert_eq!((task.status, task.moved), (MoveTaskStatus::Completed, 6));
    assert_eq!(engine.message_count(&dlq).unwrap(), 0);
    let mut bodies: Vec<String> = engine
        .receive(&origin, receive_all(60_000))
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4", "m5"]);
}
