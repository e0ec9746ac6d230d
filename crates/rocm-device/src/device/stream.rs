//! The default stream and events.

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::platform::{EventHandle, RawDevice, StreamHandle};

/// A stream of the device: work on it runs in order.
pub struct Stream {
    pub(crate) raw: Arc<dyn RawDevice>,
    pub(crate) handle: StreamHandle,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:#x})", self.handle)
    }
}

impl Stream {
    /// Waits for everything queued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.raw.stream_synchronize(self.handle)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let done = self
            .raw
            .stream_synchronize(self.handle)
            .and_then(|()| self.raw.stream_destroy(self.handle));
        if let Err(e) = done {
            tracing::warn!("destroying a stream failed: {e}");
        }
    }
}

/// A point in a stream, for timing and waiting.
pub struct Event {
    pub(crate) raw: Arc<dyn RawDevice>,
    pub(crate) handle: EventHandle,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({:#x})", self.handle)
    }
}

impl Event {
    /// Marks the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.raw.event_record(self.handle, stream.handle)
    }
    /// Waits until the recorded point is reached.
    pub fn synchronize(&self) -> Result<()> {
        self.raw.event_synchronize(self.handle)
    }
    /// Whether the recorded point has been reached, without waiting (a fault of the work
    /// before it is an error).
    pub fn query(&self) -> Result<bool> {
        self.raw.event_query(self.handle)
    }
    /// Milliseconds from `self` to `end` (both recorded and reached).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.raw.event_elapsed_ms(self.handle, end.handle)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Err(e) = self.raw.event_destroy(self.handle) {
            tracing::warn!("destroying an event failed: {e}");
        }
    }
}
