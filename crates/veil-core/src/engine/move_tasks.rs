//! The engine side of message move tasks (docs/semantics.md §8): starting, listing and cancelling them, and
//! `drive_move_tasks`, the step a server calls periodically that moves, for every running task, as many
//! messages as its rate allows since the last step.
//!
//! A task moves the messages its source held when it started (sequence numbers below `seq_end`) that are
//! visible, each in one atomic step under the engine lock through the same arrival as every other move
//! (`Engine::arrive`): the message leaves the source and arrives as a fresh visible message in its target,
//! marked as re-queued from the source. A task without a destination sends each message back to the queue it
//! was dead-lettered from, which only its payload records; payloads are read outside the lock, and each
//! message is checked again under the lock (still there, visible, same generation) before it moves.
//!
//! Tasks are durable (`StoreOp::PutMoveTask`, written with the moves of the same step), so a restart continues
//! them. Time comes only from the engine's clock.

use uuid::Uuid;

use super::moves::{Arrival, Destination};
use super::{Engine, Locked, State};
use crate::clock::Millis;
use crate::error::{EngineError, EngineResult};
use crate::history::DeliveryEnding;
use crate::inbox::{self, ArrivalRule, Outbound};
use crate::limits;
use crate::model::{MoveReason, MovedFrom, QueueId, QueueKey, Seq};
use crate::move_task::{
    MoveTaskError, MoveTaskFailure, MoveTaskId, MoveTaskRecord, MoveTaskStatus,
    DESTINATION_ELSEWHERE,
};
use crate::store::{Commit, Store, StoreError, StoreOp};

/// A thousandth of a message: the unit of a task's rate allowance, so that rates below one message per step
/// accumulate exactly.
const MILLI_PER_MESSAGE: u64 = 1_000;

/// Every move task of the engine, in start order, with what pacing needs between steps. Lives in the engine's
/// `State`, under the one lock.
pub(super) struct MoveTasks {
    tasks: Vec<Task>,
    next_number: u64,
}

struct Task {
    record: MoveTaskRecord,
    /// Moves the task may make now, in thousandths of a message: a token bucket refilled at its rate and
    /// holding at most one second's worth. Not persisted: a restart starts it with one message.
    allowance_milli: u64,
    refilled_at: Millis,
}

impl Task {
    fn new(record: MoveTaskRecord, now: Millis) -> Self {
        Self {
            record,
            allowance_milli: MILLI_PER_MESSAGE,
            refilled_at: now,
        }
    }

    /// Brings the allowance up to `now` and returns how many messages the task may move in this step.
    fn refill(&mut self, now: Millis) -> usize {
        let Some(rate) = self.record.rate_per_s_max else {
            return limits::MOVE_TASK_MOVES_PER_STEP_MAX;
        };
        let rate = u64::from(rate);
        let elapsed_ms = now.saturating_sub(self.refilled_at);
        // Milliseconds × messages per second = thousandths of a message.
        let earned = elapsed_ms.saturating_mul(rate);
        self.allowance_milli = self
            .allowance_milli
            .saturating_add(earned)
            .min(rate.saturating_mul(MILLI_PER_MESSAGE));
        self.refilled_at = self.refilled_at.max(now);
        self.allowance()
    }

    fn allowance(&self) -> usize {
        match self.record.rate_per_s_max {
            None => limits::MOVE_TASK_MOVES_PER_STEP_MAX,
            Some(_) => usize::try_from(self.allowance_milli / MILLI_PER_MESSAGE)
                .unwrap_or(usize::MAX)
                .min(limits::MOVE_TASK_MOVES_PER_STEP_MAX),
        }
    }

    fn spend_one(&mut self) {
        if self.record.rate_per_s_max.is_some() {
            self.allowance_milli = self.allowance_milli.saturating_sub(MILLI_PER_MESSAGE);
        }
    }

    fn finish(&mut self, status: MoveTaskStatus, failure: Option<MoveTaskFailure>) {
        self.record.status = status;
        self.record.failure = failure;
    }
}

impl MoveTasks {
    /// The tasks the store kept, each running one continuing from `now`.
    pub(super) fn load(store: &dyn Store, now: Millis) -> Result<Self, StoreError> {
        let records = store.load_move_tasks()?;
        let next_number = records.iter().map(|r| r.number + 1).max().unwrap_or(1);
        Ok(Self {
            tasks: records.into_iter().map(|r| Task::new(r, now)).collect(),
            next_number,
        })
    }

    fn of_source(&self, source: QueueId) -> impl DoubleEndedIterator<Item = &Task> {
        self.tasks.iter().filter(move |t| t.record.source == source)
    }

    fn find_mut(&mut self, source: QueueId, id: &MoveTaskId) -> Option<&mut Task> {
        self.tasks
            .iter_mut()
            .find(|t| t.record.source == source && t.record.id == *id)
    }

    fn position(&self, number: u64) -> Option<usize> {
        self.tasks.iter().position(|t| t.record.number == number)
    }

    /// Forgets the oldest finished tasks of `source` beyond the number kept.
    fn trim(&mut self, source: QueueId, ops: &mut Vec<StoreOp>) {
        let finished: Vec<u64> = self
            .of_source(source)
            .filter(|t| !t.record.status.is_running())
            .map(|t| t.record.number)
            .collect();
        let excess = finished
            .len()
            .saturating_sub(limits::MOVE_TASKS_FINISHED_PER_SOURCE_MAX);
        for number in &finished[..excess] {
            self.tasks.retain(|t| t.record.number != *number);
            ops.push(StoreOp::DeleteMoveTask { number: *number });
        }
    }

    /// Forgets every task whose source queue no longer exists: nobody can list or cancel it.
    fn forget_orphans(&mut self, state_queues: impl Fn(QueueId) -> bool, ops: &mut Vec<StoreOp>) {
        self.tasks.retain(|t| {
            let keep = state_queues(t.record.source);
            if !keep {
                ops.push(StoreOp::DeleteMoveTask {
                    number: t.record.number,
                });
            }
            keep
        });
    }
}

/// What one step plans for one running task before it reads payloads outside the lock.
struct Plan {
    number: u64,
    source: QueueId,
    /// `(seq, generation)` of visible messages the task has to move, in delivery order.
    candidates: Vec<(Seq, u32)>,
    /// For a task without a destination: each candidate's origin as its payload records it (`None` when the
    /// payload is gone, `Some(None)` when it records none), read in the second phase.
    origins: Option<Vec<Option<Option<QueueKey>>>>,
}

/// Where one candidate goes, or why the task stops on it.
enum Target {
    Queue(Destination),
    Skip,
    Fail(MoveTaskFailure),
}

impl Engine {
    /// Starts a task that moves the messages `source` holds now — back to the queue each was dead-lettered
    /// from, or to `destination` — at most `rate_per_s_max` per second (`None`: as fast as the steps allow).
    /// A source runs one task at a time. Returns the task as listed; it is durable.
    pub async fn start_move_task(
        &self,
        source: &QueueKey,
        destination: Option<&QueueKey>,
        rate_per_s_max: Option<u32>,
    ) -> Result<MoveTaskRecord, MoveTaskError> {
        if rate_per_s_max == Some(0) {
            return Err(MoveTaskError::RateZero);
        }
        let now = self.clock.now();
        let task_id = Uuid::new_v4().into_bytes();
        let (record, commit) = self
            .on_queue(source, now, |locked| {
                let source_id = locked.id;
                let destination = match destination {
                    None => None,
                    Some(key) => {
                        // A destination of another partition is known by its key; the front-end checked
                        // that it exists, and a message that finds it gone comes back (crate::inbox).
                        let id = match self.destination(locked.state, key) {
                            Some(Destination::Here(id)) => id,
                            Some(Destination::Elsewhere(..)) => DESTINATION_ELSEWHERE,
                            None => return Err(MoveTaskError::DestinationNotFound),
                        };
                        if id == source_id {
                            return Err(MoveTaskError::DestinationIsSource);
                        }
                        Some((id, key.clone()))
                    }
                };
                let tasks = &locked.state.move_tasks;
                if tasks
                    .of_source(source_id)
                    .any(|t| t.record.status.is_running())
                {
                    return Err(MoveTaskError::AlreadyRunning);
                }
                let stats = locked.index().stats(now);
                let number = locked.state.move_tasks.next_number;
                let record = MoveTaskRecord {
                    number,
                    id: task_id,
                    source: source_id,
                    source_key: source.clone(),
                    destination,
                    rate_per_s_max,
                    started_at: now,
                    seq_end: stats.seq_range.map_or(0, |(_, last)| last + 1),
                    to_move: stats.visible + stats.hidden,
                    moved: 0,
                    status: MoveTaskStatus::Running,
                    failure: None,
                };
                let tasks = &mut locked.state.move_tasks;
                tasks.next_number += 1;
                tasks.tasks.push(Task::new(record.clone(), now));
                locked
                    .ops
                    .push(StoreOp::PutMoveTask(Box::new(record.clone())));
                locked.state.move_tasks.trim(source_id, &mut locked.ops);
                Ok(record)
            })
            .map_err(source_error)?;
        let record = record?;
        Self::durable(commit).await?;
        Ok(record)
    }

    /// The tasks of `source`, most recent first: the running one, if any, and up to
    /// `limits::MOVE_TASKS_FINISHED_PER_SOURCE_MAX` finished ones.
    pub fn move_tasks(&self, source: &QueueKey) -> Result<Vec<MoveTaskRecord>, MoveTaskError> {
        let state = self.state.lock();
        let source = state
            .by_key
            .get(source)
            .copied()
            .ok_or(MoveTaskError::SourceNotFound)?;
        Ok(state
            .move_tasks
            .of_source(source)
            .rev()
            .map(|t| t.record.clone())
            .collect())
    }

    /// Cancels the running task `id` of `source`; the messages it moved stay moved. Returns the task as it
    /// stopped; the cancellation is durable.
    pub async fn cancel_move_task(
        &self,
        source: &QueueKey,
        id: &MoveTaskId,
    ) -> Result<MoveTaskRecord, MoveTaskError> {
        let now = self.clock.now();
        let (record, commit) = self
            .on_queue(source, now, |locked| {
                let source_id = locked.id;
                let tasks = &mut locked.state.move_tasks;
                let task = tasks
                    .find_mut(source_id, id)
                    .ok_or(MoveTaskError::TaskNotFound)?;
                if !task.record.status.is_running() {
                    return Err(MoveTaskError::NotRunning);
                }
                task.finish(MoveTaskStatus::Cancelled, None);
                let record = task.record.clone();
                locked
                    .ops
                    .push(StoreOp::PutMoveTask(Box::new(record.clone())));
                tasks.trim(source_id, &mut locked.ops);
                Ok(record)
            })
            .map_err(source_error)?;
        let record = record?;
        Self::durable(commit).await?;
        Ok(record)
    }

    /// One step of every running task: each moves as many of its messages as its rate allows since its last
    /// step (without a rate, up to `limits::MOVE_TASK_MOVES_PER_STEP_MAX`), completes when none of them is
    /// visible any more, or fails on a message it cannot move. Returns once the step is durable. The server
    /// calls this periodically; tests call it after advancing their clock.
    pub async fn drive_move_tasks(&self) -> EngineResult<()> {
        let commit = self.move_tasks_step()?;
        Self::durable(commit).await
    }

    fn move_tasks_step(&self) -> EngineResult<Option<Commit>> {
        let now = self.clock.now();
        let (mut plans, orphans) = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let mut ops = Vec::new();
            let queues = &state.queues;
            state
                .move_tasks
                .forget_orphans(|id| queues.contains_key(&id), &mut ops);
            (Self::plan_moves(state, now), self.submit(ops))
        };
        drop(orphans); // forgetting unreachable tasks is no success to wait for
        if plans.is_empty() {
            return Ok(None);
        }
        for plan in plans.iter_mut().filter(|p| p.origins.is_some()) {
            let seqs: Vec<Seq> = plan.candidates.iter().map(|&(seq, _)| seq).collect();
            let payloads = self.store.read_payloads(plan.source, &seqs)?;
            plan.origins = Some(
                payloads
                    .into_iter()
                    .map(|p| p.map(|p| p.dead_letter_source().cloned()))
                    .collect(),
            );
        }
        let now = self.clock.now();
        let mut guard = self.state.lock();
        let mut ops = Vec::new();
        for plan in plans {
            ops = self.apply_plan(&mut guard, plan, now, ops);
        }
        Ok(self.submit(ops))
    }

    /// The first phase of a step, under the lock: which visible messages each running task would move now.
    fn plan_moves(state: &mut State, now: Millis) -> Vec<Plan> {
        let mut plans = Vec::new();
        for task in state.move_tasks.tasks.iter_mut() {
            if !task.record.status.is_running() {
                continue;
            }
            let budget = task.refill(now);
            if budget == 0 {
                continue;
            }
            let record = &task.record;
            let Some(index) = state.queues.get(&record.source) else {
                continue;
            };
            let mut candidates = Vec::new();
            let mut cursor = None;
            while candidates.len() < budget {
                let Some(entry) = index.next_ready(cursor) else {
                    break;
                };
                cursor = Some(entry);
                let seq = entry.1;
                if seq >= record.seq_end {
                    continue; // arrived after the task started
                }
                if let Some(current) = index.get(seq) {
                    candidates.push((seq, current.generation));
                }
            }
            // Even with no candidate the task takes part in the last phase, which brings the source up to
            // date and completes the task if nothing is left to move.
            plans.push(Plan {
                number: record.number,
                source: record.source,
                candidates,
                origins: record.destination.is_none().then(Vec::new),
            });
        }
        plans
    }

    /// The last phase of a step for one task, under the lock: moves each planned message that is still there,
    /// visible and of the planned generation, within the task's allowance; then completes or fails the task.
    fn apply_plan(
        &self,
        state: &mut State,
        plan: Plan,
        now: Millis,
        ops: Vec<StoreOp>,
    ) -> Vec<StoreOp> {
        let Some(position) = state.move_tasks.position(plan.number) else {
            return ops; // forgotten since the plan
        };
        if !state.move_tasks.tasks[position].record.status.is_running()
            || !state.queues.contains_key(&plan.source)
        {
            return ops; // cancelled, or its source deleted, since the plan
        }
        let mut locked = self.brought_up_to(state, plan.source, now, ops);
        let moved_before = locked.state.move_tasks.tasks[position].record.moved;
        let (targets, failure) = self.move_planned(&mut locked, position, &plan);
        let done = failure.is_none() && !Self::anything_left(&mut locked, position);
        // The source's own promotions, net of what moved out.
        locked.index().waiters.wake();
        for target in targets {
            let index = locked
                .state
                .queues
                .get_mut(&target)
                .expect("resolved above");
            // The moved messages that became deliverable there wake as many of its waiters.
            index.waiters.wake();
            locked
                .ops
                .push(StoreOp::put_counters(target, index.counters));
        }
        Self::end_step(&mut locked, position, moved_before, failure, done);
        locked.ops
    }

    /// Moves the plan's candidates that are still as planned, while the task's allowance lasts. Returns the
    /// queues they went to, and the reason the task fails if one candidate makes it stop.
    fn move_planned(
        &self,
        locked: &mut Locked<'_>,
        position: usize,
        plan: &Plan,
    ) -> (Vec<QueueId>, Option<MoveTaskFailure>) {
        let now = locked.now;
        let mut targets: Vec<QueueId> = Vec::new();
        for (i, &(seq, generation)) in plan.candidates.iter().enumerate() {
            if locked.state.move_tasks.tasks[position].allowance() == 0 {
                break;
            }
            let index = locked.index();
            let Some(current) = index
                .get(seq)
                .filter(|s| s.visible_at <= now && s.generation == generation)
            else {
                continue; // deleted, received or moved since the plan
            };
            let origin = plan
                .origins
                .as_ref()
                .map(|origins| origins.get(i).and_then(Option::as_ref));
            match self.move_target(locked.state, position, origin) {
                Target::Skip => continue,
                Target::Fail(reason) => return (targets, Some(reason)),
                Target::Queue(target) => {
                    let here = Self::move_one(locked, position, (seq, current), target);
                    if let Some(target) = here.filter(|target| !targets.contains(target)) {
                        targets.push(target);
                    }
                }
            }
        }
        (targets, None)
    }

    /// Records how the step left the task (its progress, completed or failed) and the source's counters;
    /// a task that ended makes room under the per-source cap on finished tasks kept.
    fn end_step(
        locked: &mut Locked<'_>,
        position: usize,
        moved_before: u64,
        failure: Option<MoveTaskFailure>,
        done: bool,
    ) {
        let source = locked.id;
        let task = &mut locked.state.move_tasks.tasks[position];
        let moved = task.record.moved != moved_before;
        match failure {
            Some(reason) => task.finish(MoveTaskStatus::Failed, Some(reason)),
            None if done => task.finish(MoveTaskStatus::Completed, None),
            None => {}
        }
        if moved || !task.record.status.is_running() {
            let record = task.record.clone();
            locked.ops.push(StoreOp::PutMoveTask(Box::new(record)));
        }
        if moved {
            let counters = locked.index().counters;
            locked.ops.push(StoreOp::put_counters(source, counters));
        }
        if !locked.state.move_tasks.tasks[position]
            .record
            .status
            .is_running()
        {
            locked.state.move_tasks.trim(source, &mut locked.ops);
        }
    }

    /// Where the candidate goes: the task's destination, else the queue its payload says it was
    /// dead-lettered from (`origin`: `None` when its payload is gone, so it is skipped).
    fn move_target(
        &self,
        state: &State,
        position: usize,
        origin: Option<Option<&Option<QueueKey>>>,
    ) -> Target {
        let record = &state.move_tasks.tasks[position].record;
        let target = match (&record.destination, origin) {
            (Some((DESTINATION_ELSEWHERE, key)), _) => self.destination(state, key),
            (Some((id, _)), _) => state
                .queues
                .contains_key(id)
                .then_some(Destination::Here(*id)),
            (None, Some(None)) | (None, None) => return Target::Skip,
            (None, Some(Some(None))) => {
                return Target::Fail(MoveTaskFailure::OriginUnknown);
            }
            (None, Some(Some(Some(key)))) => self.destination(state, key),
        };
        match target {
            Some(target) if target != Destination::Here(record.source) => Target::Queue(target),
            _ => Target::Fail(MoveTaskFailure::TargetQueueMissing),
        }
    }

    /// Moves one visible message of the task's source to `target` (one atomic engine step): a move out of the
    /// source, a send at the target, where it arrives fresh and visible, marked as re-queued from the source.
    /// A target of another partition gets it through its inbox. Returns the target when it is here.
    fn move_one(
        locked: &mut Locked<'_>,
        position: usize,
        (seq, current): (Seq, crate::model::MessageState),
        target: Destination,
    ) -> Option<QueueId> {
        let (source, now) = (locked.id, locked.now);
        let index = locked.index();
        let redrive = index.redrive(seq).cloned();
        let group = index.group_of(seq).map(str::to_owned);
        let history = index.history.take(seq);
        index.remove(seq);
        index.counters.moves_out += 1;
        let moved_from = MovedFrom {
            queue: index.record.key.clone(),
            reason: MoveReason::Requeue,
        };
        let task = &mut locked.state.move_tasks.tasks[position];
        task.record.moved += 1;
        task.spend_one();
        let target = match target {
            Destination::Here(target) => target,
            Destination::Elsewhere(key, partition) => {
                let history = history.map(|history| {
                    let ending = DeliveryEnding::Moved {
                        to: Box::new(key.clone()),
                    };
                    crate::history::ended_by_move(history, ending, now)
                });
                locked
                    .ops
                    .push(StoreOp::SendToInbox(Box::new(crate::store::SendToInbox {
                        from: (source, seq),
                        partition,
                        entry: Outbound {
                            target: key,
                            rule: ArrivalRule::Requeue,
                            state: current,
                            moved_from: Some(moved_from),
                            redrive,
                            group,
                            history,
                        },
                    })));
                return None;
            }
        };
        let history = history.map(|history| {
            let to = locked.state.queues[&target].record.key.clone();
            crate::history::ended_by_move(history, DeliveryEnding::Moved { to: Box::new(to) }, now)
        });
        let arrival = Arrival {
            from: (source, seq),
            target,
            state: inbox::fresh(current, now),
            moved_from,
            redrive,
            group,
            history,
        };
        Self::arrive(locked.state, arrival, now, &mut locked.ops);
        let target_index = locked
            .state
            .queues
            .get_mut(&target)
            .expect("resolved above");
        target_index.counters.sends += 1;
        Some(target)
    }

    /// Whether a message the task has to move is still visible in its source.
    fn anything_left(locked: &mut Locked<'_>, position: usize) -> bool {
        let seq_end = locked.state.move_tasks.tasks[position].record.seq_end;
        let index = locked.index();
        let mut cursor = None;
        while let Some(entry) = index.next_ready(cursor) {
            if entry.1 < seq_end {
                return true;
            }
            cursor = Some(entry);
        }
        false
    }
}

/// `on_queue` fails only when the source queue is missing.
fn source_error(error: EngineError) -> MoveTaskError {
    match error {
        EngineError::QueueNotFound(_) => MoveTaskError::SourceNotFound,
        other => MoveTaskError::Engine(other),
    }
}
