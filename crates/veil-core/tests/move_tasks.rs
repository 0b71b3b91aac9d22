//! Message move tasks (docs/semantics.md §8): a task moves the visible messages its source held when it
//! started, back to the queue each was dead-lettered from or to a named destination, at most its rate per
//! second of the engine's clock, one atomic move per message; it survives a restart. The clock is manual and
//! every step is driven by the test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use veil_core::*;

/// A dead-letter queue `dlq` and an origin queue per name whose redrive policy sends a message there on the
/// receive after its first.
async fn dead_letter_setup<S: Store>(
    h: &Harness<S>,
    origins: &[&str],
) -> (QueueKey, Vec<QueueKey>) {
    let dlq = h.queue("dlq").await;
    let mut keys = Vec::new();
    for name in origins {
        let config = QueueConfig {
            redrive_policy: Some(RedrivePolicy {
                dead_letter_queue: dlq.clone(),
                max_receive_count: 1,
            }),
            ..QueueConfig::default()
        };
        keys.push(h.queue_with(name, config).await);
    }
    (dlq, keys)
}

/// Sends `bodies` to `origin` and dead-letters them: one receive each, then the receive that moves them.
async fn dead_letter(h: &Harness, origin: &QueueKey, bodies: &[&str]) {
    for text in bodies {
        h.send(origin, text).await;
    }
    assert_eq!(
        h.receive(origin, bodies.len(), Some(0)).await.len(),
        bodies.len(),
        "each message is delivered once"
    );
    assert!(
        h.receive(origin, bodies.len(), None).await.is_empty(),
        "the second receive dead-letters them"
    );
}

/// A harness whose one origin, `orders`, has dead-lettered `bodies` into `dlq`: (harness, dlq, orders).
async fn orders_dead_lettered(bodies: &[&str]) -> (Harness, QueueKey, QueueKey) {
    let h = Harness::new();
    let (dlq, mut origins) = dead_letter_setup(&h, &["orders"]).await;
    let origin = origins.remove(0);
    dead_letter(&h, &origin, bodies).await;
    (h, dlq, origin)
}

async fn bodies_of(h: &Harness, key: &QueueKey) -> Vec<String> {
    let mut got: Vec<String> = h
        .engine
        .peek(key, 1_000)
        .await
        .unwrap()
        .iter()
        .map(|m| body(m).to_owned())
        .collect();
    got.sort();
    got
}

fn only_task(h: &Harness, source: &QueueKey) -> MoveTaskRecord {
    let mut tasks = h.engine.move_tasks(source).unwrap();
    assert_eq!(tasks.len(), 1, "one task listed: {tasks:?}");
    tasks.remove(0)
}

fn advance_ms(h: &Harness, ms: u64) {
    h.clock.advance(Duration::from_millis(ms));
}

#[tokio::test]
async fn without_a_destination_each_message_goes_back_to_the_queue_it_was_dead_lettered_from() {
    let h = Harness::new();
    let (dlq, origins) = dead_letter_setup(&h, &["orders", "payments"]).await;
    dead_letter(&h, &origins[0], &["o1", "o2"]).await;
    dead_letter(&h, &origins[1], &["p1"]).await;
    assert_eq!(h.stats(&dlq).visible, 3);

    let started = h.engine.start_move_task(&dlq, None, None).await.unwrap();
    assert_eq!(
        (started.status, started.to_move, started.moved),
        (MoveTaskStatus::Running, 3, 0)
    );
    assert_eq!(started.started_at, START_MS);
    h.engine.drive_move_tasks().await.unwrap();

    assert_eq!(bodies_of(&h, &origins[0]).await, ["o1", "o2"]);
    assert_eq!(bodies_of(&h, &origins[1]).await, ["p1"]);
    assert_eq!(h.engine.message_count(&dlq).unwrap(), 0, "the DLQ is empty");
    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.status, task.moved, task.to_move, task.failure),
        (MoveTaskStatus::Completed, 3, 3, None)
    );
    h.engine.check_invariants();
}

#[tokio::test]
async fn a_moved_message_arrives_fresh_and_is_counted_as_a_move_out_and_a_send() {
    let (h, dlq, origin) = orders_dead_lettered(&["again"]).await;
    let origin_before = h.stats(&origin).counters;
    let dlq_before = h.stats(&dlq).counters;
    h.advance_s(7);

    h.engine.start_move_task(&dlq, None, None).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();

    let back = h.receive_one(&origin, 30).await;
    assert_eq!(body(&back), "again");
    assert_eq!(
        back.state.receive_count, 1,
        "the count starts again: this is its first receive since the move"
    );
    assert_eq!(back.state.first_received_at, START_MS + 7_000);
    assert_eq!(
        back.payload.moved_from,
        Some(MovedFrom {
            queue: dlq.clone(),
            reason: MoveReason::Requeue
        })
    );
    assert_eq!(back.payload.dead_letter_source(), None);
    let (origin_after, dlq_after) = (h.stats(&origin).counters, h.stats(&dlq).counters);
    assert_eq!(origin_after.sends, origin_before.sends + 1);
    assert_eq!(
        (dlq_after.moves_out, dlq_after.deletes),
        (dlq_before.moves_out + 1, dlq_before.deletes),
        "a move is no delete"
    );
}

#[tokio::test]
async fn with_a_destination_every_message_goes_there() {
    let h = Harness::new();
    let (dlq, origins) = dead_letter_setup(&h, &["orders", "payments"]).await;
    let target = h.queue("target").await;
    dead_letter(&h, &origins[0], &["o1"]).await;
    dead_letter(&h, &origins[1], &["p1"]).await;
    h.send(&dlq, "sent to the DLQ directly").await;

    let started = h
        .engine
        .start_move_task(&dlq, Some(&target), None)
        .await
        .unwrap();
    assert_eq!(
        started.destination,
        Some((target_id(&h, &target), target.clone()))
    );
    h.engine.drive_move_tasks().await.unwrap();

    assert_eq!(
        bodies_of(&h, &target).await,
        ["o1", "p1", "sent to the DLQ directly"]
    );
    assert!(bodies_of(&h, &origins[0]).await.is_empty());
    assert_eq!(only_task(&h, &dlq).status, MoveTaskStatus::Completed);
}

fn target_id(h: &Harness, key: &QueueKey) -> QueueId {
    h.engine.queue_info(key).unwrap().id
}

#[tokio::test]
async fn a_rate_allows_that_many_moves_per_second_of_the_clock_and_no_burst_beyond_one_second() {
    let h = Harness::new();
    let (dlq, origins) = dead_letter_setup(&h, &["orders"]).await;
    let bodies: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    dead_letter(&h, &origins[0], &refs).await;

    h.engine.start_move_task(&dlq, None, Some(2)).await.unwrap();
    let moved = |h: &Harness| only_task(h, &dlq).moved;
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(moved(&h), 1, "the first message moves at once");
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(moved(&h), 1, "no time passed, nothing more moves");
    advance_ms(&h, 499);
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(moved(&h), 1, "2 per second: not yet half a second");
    advance_ms(&h, 1);
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(moved(&h), 2);
    advance_ms(&h, 1_000);
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(moved(&h), 4);
    h.advance_s(60);
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(
        moved(&h),
        6,
        "an idle minute allows one second's worth, not a burst"
    );
    assert_eq!(h.stats(&origins[0]).visible, 6);
    assert_eq!(h.stats(&dlq).visible, 6);
    for _ in 0..3 {
        h.advance_s(1);
        h.engine.drive_move_tasks().await.unwrap();
    }
    let task = only_task(&h, &dlq);
    assert_eq!((task.moved, task.status), (12, MoveTaskStatus::Completed));
    assert_eq!(bodies_of(&h, &origins[0]).await, bodies);
}

#[tokio::test]
async fn without_a_rate_one_step_moves_up_to_the_per_step_cap() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let target = h.queue("target").await;
    let count = limits::MOVE_TASK_MOVES_PER_STEP_MAX + 5;
    let messages = (0..count)
        .map(|i| NewMessage::new(format!("m{i}")))
        .collect();
    h.engine.send(&dlq, messages).await.unwrap();

    h.engine
        .start_move_task(&dlq, Some(&target), None)
        .await
        .unwrap();
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(
        only_task(&h, &dlq).moved,
        limits::MOVE_TASK_MOVES_PER_STEP_MAX as u64
    );
    h.engine.drive_move_tasks().await.unwrap();
    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.moved, task.status),
        (count as u64, MoveTaskStatus::Completed)
    );
    assert_eq!(h.stats(&target).visible, count as u64);
}

#[tokio::test]
async fn a_task_moves_only_what_its_source_held_when_it_started() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let target = h.queue("target").await;
    h.send(&dlq, "before").await;
    let started = h
        .engine
        .start_move_task(&dlq, Some(&target), Some(10))
        .await
        .unwrap();
    h.send(&dlq, "after").await;
    assert_eq!(started.to_move, 1);
    h.advance_s(1);
    h.engine.drive_move_tasks().await.unwrap();

    assert_eq!(bodies_of(&h, &target).await, ["before"]);
    assert_eq!(bodies_of(&h, &dlq).await, ["after"]);
    assert_eq!(only_task(&h, &dlq).status, MoveTaskStatus::Completed);
}

#[tokio::test]
async fn hidden_messages_stay_and_the_task_completes_when_none_of_its_messages_is_visible() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let target = h.queue("target").await;
    for text in ["a", "b", "c"] {
        h.send(&dlq, text).await;
    }
    let held = h.receive_one(&dlq, 60).await;

    let started = h
        .engine
        .start_move_task(&dlq, Some(&target), None)
        .await
        .unwrap();
    assert_eq!(
        started.to_move, 3,
        "visible and hidden messages are to move"
    );
    h.engine.drive_move_tasks().await.unwrap();

    let task = only_task(&h, &dlq);
    assert_eq!((task.status, task.moved), (MoveTaskStatus::Completed, 2));
    assert_eq!(h.stats(&dlq).hidden, 1, "the held message was not moved");
    h.engine
        .delete(&dlq, held.receipt.as_deref().unwrap(), ReceiptRule::Current)
        .await
        .expect("its receipt still works");
}

#[tokio::test]
async fn a_source_runs_one_task_at_a_time() {
    let (h, dlq, _) = orders_dead_lettered(&["a", "b", "c"]).await;
    let first = h.engine.start_move_task(&dlq, None, Some(1)).await.unwrap();

    let second = h.engine.start_move_task(&dlq, None, Some(1)).await;
    assert!(
        matches!(second, Err(MoveTaskError::AlreadyRunning)),
        "{second:?}"
    );
    h.engine.cancel_move_task(&dlq, &first.id).await.unwrap();
    let third = h.engine.start_move_task(&dlq, None, None).await.unwrap();

    let listed = h.engine.move_tasks(&dlq).unwrap();
    let ids: Vec<MoveTaskId> = listed.iter().map(|t| t.id).collect();
    assert_eq!(ids, [third.id, first.id], "most recent first");
}

#[tokio::test]
async fn a_cancelled_task_moves_nothing_more_and_keeps_what_it_moved() {
    let (h, dlq, origin) = orders_dead_lettered(&["a", "b", "c", "d"]).await;
    let task = h.engine.start_move_task(&dlq, None, Some(1)).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();

    let cancelled = h.engine.cancel_move_task(&dlq, &task.id).await.unwrap();
    assert_eq!(
        (cancelled.status, cancelled.moved),
        (MoveTaskStatus::Cancelled, 1)
    );
    h.advance_s(10);
    h.engine.drive_move_tasks().await.unwrap();
    assert_eq!(h.stats(&dlq).visible, 3, "nothing moves after the cancel");
    assert_eq!(h.stats(&origin).visible, 1);
    assert_eq!(only_task(&h, &dlq), cancelled);

    let again = h.engine.cancel_move_task(&dlq, &task.id).await;
    assert!(matches!(again, Err(MoveTaskError::NotRunning)), "{again:?}");
    let unknown = h.engine.cancel_move_task(&dlq, &[7; 16]).await;
    assert!(
        matches!(unknown, Err(MoveTaskError::TaskNotFound)),
        "{unknown:?}"
    );
    let elsewhere = h.engine.cancel_move_task(&origin, &task.id).await;
    assert!(
        matches!(elsewhere, Err(MoveTaskError::TaskNotFound)),
        "a task belongs to its source: {elsewhere:?}"
    );
}

#[tokio::test]
async fn a_message_with_no_recorded_origin_fails_a_task_without_destination() {
    let (h, dlq, origin) = orders_dead_lettered(&["dead-lettered"]).await;
    h.send(&dlq, "sent directly").await;

    h.engine.start_move_task(&dlq, None, None).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();

    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.status, task.failure, task.moved),
        (
            MoveTaskStatus::Failed,
            Some(MoveTaskFailure::OriginUnknown),
            1
        )
    );
    assert_eq!(bodies_of(&h, &dlq).await, ["sent directly"]);
    assert_eq!(bodies_of(&h, &origin).await, ["dead-lettered"]);
    h.engine
        .start_move_task(&dlq, None, None)
        .await
        .expect("a failed task is not running");
}

#[tokio::test]
async fn an_origin_that_no_longer_exists_fails_the_task() {
    let (h, dlq, origin) = orders_dead_lettered(&["orphan"]).await;
    h.engine.delete_queue(&origin).await.unwrap();

    h.engine.start_move_task(&dlq, None, None).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();

    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.status, task.failure),
        (
            MoveTaskStatus::Failed,
            Some(MoveTaskFailure::TargetQueueMissing)
        )
    );
    assert_eq!(bodies_of(&h, &dlq).await, ["orphan"]);
}

#[tokio::test]
async fn a_destination_deleted_while_the_task_runs_fails_it() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let target = h.queue("target").await;
    for text in ["a", "b", "c"] {
        h.send(&dlq, text).await;
    }
    h.engine
        .start_move_task(&dlq, Some(&target), Some(1))
        .await
        .unwrap();
    h.engine.drive_move_tasks().await.unwrap();
    h.engine.delete_queue(&target).await.unwrap();
    h.engine
        .create_queue(target.clone(), QueueConfig::default())
        .await
        .unwrap();
    h.advance_s(1);
    h.engine.drive_move_tasks().await.unwrap();

    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.status, task.failure, task.moved),
        (
            MoveTaskStatus::Failed,
            Some(MoveTaskFailure::TargetQueueMissing),
            1
        ),
        "a queue of the same name made since is another queue"
    );
    assert_eq!(h.stats(&dlq).visible, 2);
    assert_eq!(h.stats(&target).visible, 0);
}

#[tokio::test]
async fn start_refuses_missing_queues_the_source_as_destination_and_a_zero_rate() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let missing = QueueKey::new(DEFAULT_NAMESPACE, "missing");
    let refusals = [
        h.engine.start_move_task(&missing, None, None).await,
        h.engine.start_move_task(&dlq, Some(&missing), None).await,
        h.engine.start_move_task(&dlq, Some(&dlq), None).await,
        h.engine.start_move_task(&dlq, None, Some(0)).await,
    ];
    let refused: Vec<String> = refusals
        .iter()
        .map(|r| format!("{:?}", r.as_ref().unwrap_err()))
        .collect();
    assert_eq!(
        refused,
        [
            "SourceNotFound",
            "DestinationNotFound",
            "DestinationIsSource",
            "RateZero"
        ]
    );
    assert!(h.engine.move_tasks(&dlq).unwrap().is_empty());
    assert!(matches!(
        h.engine.move_tasks(&missing),
        Err(MoveTaskError::SourceNotFound)
    ));
}

#[tokio::test]
async fn a_restart_continues_a_running_task_and_moves_each_message_once() {
    let mut h = Harness::new();
    let (dlq, origins) = dead_letter_setup(&h, &["orders"]).await;
    let bodies: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    dead_letter(&h, &origins[0], &refs).await;
    let started = h.engine.start_move_task(&dlq, None, Some(1)).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();
    h.advance_s(1);
    h.engine.drive_move_tasks().await.unwrap();

    h.restart();
    let task = only_task(&h, &dlq);
    assert_eq!(
        (task.id, task.status, task.moved, task.to_move),
        (started.id, MoveTaskStatus::Running, 2, 5)
    );
    for _ in 0..3 {
        h.engine.drive_move_tasks().await.unwrap();
        h.advance_s(1);
    }
    h.engine.drive_move_tasks().await.unwrap();

    let task = only_task(&h, &dlq);
    assert_eq!((task.status, task.moved), (MoveTaskStatus::Completed, 5));
    assert_eq!(bodies_of(&h, &origins[0]).await, bodies);
    assert_eq!(h.engine.message_count(&dlq).unwrap(), 0);
    assert_eq!(
        h.store.message_count(),
        5,
        "nothing duplicated in the store"
    );
    h.restart();
    assert_eq!(
        only_task(&h, &dlq),
        task,
        "the finished task is durable too"
    );
}

#[tokio::test]
async fn ten_finished_tasks_are_kept_per_source() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    let mut ids = Vec::new();
    for _ in 0..12 {
        let task = h.engine.start_move_task(&dlq, None, None).await.unwrap();
        h.engine.drive_move_tasks().await.unwrap();
        ids.push(task.id);
    }
    let listed: Vec<MoveTaskId> = h
        .engine
        .move_tasks(&dlq)
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    let newest_ten: Vec<MoveTaskId> = ids.iter().rev().take(10).copied().collect();
    assert_eq!(listed, newest_ten);
}

#[tokio::test]
async fn tasks_of_a_deleted_queue_are_forgotten() {
    let h = Harness::new();
    let (dlq, _) = dead_letter_setup(&h, &["orders"]).await;
    h.send(&dlq, "a").await;
    h.engine.start_move_task(&dlq, None, Some(1)).await.unwrap();
    h.engine.delete_queue(&dlq).await.unwrap();
    h.engine.drive_move_tasks().await.unwrap();

    h.engine
        .create_queue(dlq.clone(), QueueConfig::default())
        .await
        .unwrap();
    assert!(h.engine.move_tasks(&dlq).unwrap().is_empty());
    h.engine
        .start_move_task(&dlq, None, None)
        .await
        .expect("the new queue of that name has no running task");
}

/// A memory store that runs a hook once, inside the next payload read: what another request does while a move
/// task reads payloads outside the engine lock.
struct HookStore {
    inner: memory_store::MemoryStore,
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Store for HookStore {
    fn load_queues(&self) -> Result<store::Snapshot, StoreError> {
        self.inner.load_queues()
    }
    fn load_messages(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageState),
    ) -> Result<(), StoreError> {
        self.inner.load_messages(each)
    }
    fn load_redrives(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, MessageRedrivePolicy),
    ) -> Result<(), StoreError> {
        self.inner.load_redrives(each)
    }
    fn load_groups(&self, each: &mut dyn FnMut(QueueId, Seq, String)) -> Result<(), StoreError> {
        self.inner.load_groups(each)
    }
    fn load_dedup(
        &self,
        each: &mut dyn FnMut(QueueId, String, DedupEntry),
    ) -> Result<(), StoreError> {
        self.inner.load_dedup(each)
    }
    fn load_move_tasks(&self) -> Result<Vec<MoveTaskRecord>, StoreError> {
        self.inner.load_move_tasks()
    }
    fn load_history(
        &self,
        each: &mut dyn FnMut(QueueId, Seq, DeliveryHistory),
    ) -> Result<(), StoreError> {
        self.inner.load_history(each)
    }
    fn submit(&self, ops: Vec<StoreOp>) -> store::Commit {
        self.inner.submit(ops)
    }
    fn read_payloads(
        &self,
        queue: QueueId,
        seqs: &[Seq],
    ) -> Result<Vec<Option<Payload>>, StoreError> {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.inner.read_payloads(queue, seqs)
    }
}

#[tokio::test]
async fn a_message_received_while_its_origin_is_read_is_not_moved() {
    let h = Harness::over(Arc::new(HookStore {
        inner: memory_store::MemoryStore::new(),
        hook: std::sync::Mutex::new(None),
    }));
    let (dlq, mut origins) = dead_letter_setup(&h, &["origin"]).await;
    let origin = origins.remove(0);
    let engine = &h.engine;
    let messages = vec![NewMessage::new("first"), NewMessage::new("second")];
    engine.send(&origin, messages).await.unwrap();
    let now = ReceiveOptions {
        visibility_ms: Some(0),
        wait_ms: Some(0),
        ..ReceiveOptions::new(10)
    };
    assert_eq!(engine.receive(&origin, now.clone()).await.unwrap().len(), 2);
    assert!(engine.receive(&origin, now).await.unwrap().is_empty());
    engine.start_move_task(&dlq, None, None).await.unwrap();

    // While the step reads the origins, a consumer receives the first message from the DLQ. It can: the
    // engine lock is not held during the read (were it held, the receive would not finish in time).
    let (received_tx, received) = std::sync::mpsc::channel();
    let (hook_engine, hook_dlq) = (engine.clone(), dlq.clone());
    *h.store.hook.lock().unwrap() = Some(Box::new(move || {
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let hold = ReceiveOptions {
                visibility_ms: Some(60_000),
                wait_ms: Some(0),
                ..ReceiveOptions::new(1)
            };
            let got = runtime.block_on(hook_engine.receive(&hook_dlq, hold));
            let _ = done_tx.send(got.ok().and_then(|mut m| m.pop()?.receipt));
        });
        let _ = received_tx.send(done.recv_timeout(Duration::from_secs(10)));
    }));
    engine.drive_move_tasks().await.unwrap();
    let receipt = received
        .recv()
        .unwrap()
        .expect("the receive during the payload read finished: the lock was free")
        .expect("it received a message");

    let task = engine.move_tasks(&dlq).unwrap().remove(0);
    assert_eq!(
        (task.status, task.moved),
        (MoveTaskStatus::Completed, 1),
        "only the message nobody held moved"
    );
    assert_eq!(engine.stats(&dlq).unwrap().hidden, 1);
    let back = engine.peek(&origin, 10).await.unwrap();
    assert_eq!(back.iter().map(body).collect::<Vec<_>>(), ["second"]);
    engine
        .delete(&dlq, &receipt, ReceiptRule::Current)
        .await
        .expect("the held message is still the consumer's");
}
