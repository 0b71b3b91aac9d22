//! Who is waiting on each channel right now: QueuesInfo's `Subscribers`. A receive counts itself in for as
//! long as it waits, through a guard, so a receive that ends any way (answer, error, cancelled RPC) is
//! counted out.

use std::collections::HashMap;

/// Receivers waiting on each channel. The lock is held only to count one in or out, never across an await.
pub(super) type Subscribers = parking_lot::Mutex<HashMap<String, u64>>;

/// One waiting receiver, counted while it lives.
pub(super) struct Subscription<'a> {
    subscribers: &'a Subscribers,
    channel: &'a str,
}

impl<'a> Subscription<'a> {
    pub(super) fn new(subscribers: &'a Subscribers, channel: &'a str) -> Self {
        *subscribers.lock().entry(channel.to_string()).or_insert(0) += 1;
        Self {
            subscribers,
            channel,
        }
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut counts = self.subscribers.lock();
        if let Some(count) = counts.get_mut(self.channel) {
            *count -= 1;
            if *count == 0 {
                counts.remove(self.channel);
            }
        }
    }
}
