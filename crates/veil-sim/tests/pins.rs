//! The pins of kept seeds can fail (`pin.rs`): a scenario that differs in any operation, in its setup or in
//! its length has another digest, and a run whose pin is wrong fails with a message that says to re-pin
//! rather than passing.

use veil_sim::limits::STEPS_DEFAULT;
use veil_sim::{digest, generate, run_pinned, Op, Options, Pinned};

const SEED: u64 = 21;

fn pinned_now(seed: u64, steps: usize) -> Pinned {
    let scenario = generate(seed, steps);
    let requests = veil_sim::run(&scenario, Options::default()).stats.requests;
    Pinned {
        seed,
        steps,
        // Leaked once per test: a pin names a static digest, as the kept seeds do.
        digest: Box::leak(digest(&scenario).into_boxed_str()),
        requests,
    }
}

#[test]
fn a_changed_operation_setup_or_length_changes_the_digest() {
    let scenario = generate(SEED, STEPS_DEFAULT);
    let pinned = digest(&scenario);
    assert_eq!(pinned, digest(&generate(SEED, STEPS_DEFAULT)), "stable");

    let mut one_op_changed = scenario.clone();
    let index = one_op_changed.ops.len() / 2;
    one_op_changed.ops[index] = match one_op_changed.ops[index] {
        Op::Sweep => Op::DriveMoveTasks,
        _ => Op::Sweep,
    };
    assert_ne!(pinned, digest(&one_op_changed), "an operation changed");

    let mut one_field_changed = scenario.clone();
    let advanced = one_field_changed
        .ops
        .iter_mut()
        .find_map(|op| match op {
            Op::Advance { ms } => Some(ms),
            _ => None,
        })
        .expect("a seed's run advances the clock");
    *advanced += 1;
    assert_ne!(pinned, digest(&one_field_changed), "a field changed");

    let mut setup_changed = scenario.clone();
    setup_changed.setup.fifo_redrive = !setup_changed.setup.fifo_redrive;
    assert_ne!(pinned, digest(&setup_changed), "the setup changed");

    // One more random draw per operation (a generator change) makes a longer or shifted run.
    assert_ne!(pinned, digest(&generate(SEED, STEPS_DEFAULT + 1)));
    assert_ne!(pinned, digest(&generate(SEED + 1, STEPS_DEFAULT)));
}

#[test]
fn a_seed_whose_scenario_is_not_the_pinned_one_fails_and_says_to_re_pin() {
    let right = pinned_now(SEED, 60);
    assert!(run_pinned(&right, Options::default()).is_ok());
    let wrong = Pinned {
        digest: "0123456789abcdef",
        ..right
    };
    let why = match run_pinned(&wrong, Options::default()) {
        Ok(_) => panic!("a wrong digest passed"),
        Err(why) => why,
    };
    assert!(
        why.contains("re-pin") && why.contains(right.digest),
        "{why}"
    );
}

#[test]
fn a_seed_that_makes_another_number_of_requests_fails_and_says_to_re_pin() {
    let right = pinned_now(SEED, 60);
    let wrong = Pinned {
        requests: right.requests + 1,
        ..right
    };
    let why = match run_pinned(&wrong, Options::default()) {
        Ok(_) => panic!("a wrong request count passed"),
        Err(why) => why,
    };
    assert!(
        why.contains("re-pin") && why.contains(&right.requests.to_string()),
        "{why}"
    );
}
