//! Graph capture of a device's stream and the graphs it records.

use std::fmt;

use crate::error::{Error, Result};
use crate::platform::{GraphExecHandle, GraphHandle};

use super::*;

impl Device {
    /// Records the work `f` queues on this device into a [`Graph`] instead of running it,
    /// and returns the graph with `f`'s result; `graph.replay()` then runs all of it with
    /// one launch, on the same buffers. Nothing runs during the capture: tensors `f` returns
    /// hold their values only after a replay.
    ///
    /// Rules, as for HIP and CUDA stream capture:
    /// - `f` must not wait for the device (a copy to the host, `synchronize`): that is an
    ///   error, and the capture fails.
    /// - Every buffer the work reads or writes must outlive the graph. Buffers allocated
    ///   inside `f` are the graph's own: the pool keeps them for its replays until the
    ///   graph is dropped, even when `f`'s tensors are dropped first.
    /// - Kernel arguments (shapes, offsets, scalars) are fixed at capture; values that
    ///   change between replays must live in device buffers that are rewritten in place.
    /// - Run `f` once without capture first, so its kernels are loaded and the pool holds
    ///   blocks of the right sizes (a capture that must ask the driver for memory still
    ///   works, at the cost of a driver allocation).
    /// - One capture at a time per device, and no other thread may use the device during
    ///   it: its work would be recorded too.
    pub fn capture<T, E: From<Error>>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<(Graph, T), E> {
        let arena =
            self.inner.pool.begin_capture().ok_or_else(|| {
                Error::Capture("a capture is already running on this device".into())
            })?;
        let _span = tracing::debug_span!("capture", arena).entered();
        let stream = self.inner.stream.handle;
        if let Err(e) = self.inner.raw.begin_capture(stream) {
            self.inner.pool.end_capture();
            self.inner.pool.release_graph(arena);
            return Err(e.into());
        }
        let out = f();
        // The capture must end whatever `f` did, or the stream stays unusable.
        let ended = self.inner.raw.end_capture(stream);
        self.inner.pool.end_capture();
        let built = ended.and_then(|graph| match self.inner.raw.graph_instantiate(graph) {
            Ok(exec) => Ok((graph, exec)),
            Err(e) => {
                let _ = self.inner.raw.graph_destroy(graph);
                Err(e)
            }
        });
        match (out, built) {
            (Ok(value), Ok((graph, exec))) => Ok((
                Graph {
                    device: self.clone(),
                    graph,
                    exec,
                    arena,
                },
                value,
            )),
            (Err(e), built) => {
                if let Ok((graph, exec)) = built {
                    let _ = self.inner.raw.graph_exec_destroy(exec);
                    let _ = self.inner.raw.graph_destroy(graph);
                }
                self.inner.pool.release_graph(arena);
                Err(e)
            }
            (Ok(_), Err(e)) => {
                self.inner.pool.release_graph(arena);
                Err(
                    Error::Capture(format!("the captured work could not become a graph: {e}"))
                        .into(),
                )
            }
        }
    }

    /// Host copies wait for the device, which a capture cannot do.
    pub(crate) fn refuse_under_capture(&self, op: &'static str) -> Result<()> {
        if self.inner.pool.is_capturing() {
            return Err(Error::Capture(format!(
                "{op} inside a captured closure: host copies wait for the device; make the \
                 data a device buffer before the capture, or copy after a replay"
            )));
        }
        Ok(())
    }

    /// Whether a [`Device::capture`] is recording this device's work.
    pub fn is_capturing(&self) -> bool {
        self.inner.pool.is_capturing()
    }
}

/// Work recorded by [`Device::capture`], replayed with one launch per [`Graph::replay`].
/// Dropping it returns the blocks it kept to the pool.
pub struct Graph {
    pub(crate) device: Device,
    pub(crate) graph: GraphHandle,
    pub(crate) exec: GraphExecHandle,
    pub(crate) arena: u64,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Graph({:#x} on {:?})", self.exec, self.device)
    }
}

impl Graph {
    /// Queues one run of the recorded work on the device's stream, after what is queued.
    pub fn replay(&self) -> Result<()> {
        if self.device.is_capturing() {
            return Err(Error::Capture("replaying a graph inside a capture".into()));
        }
        let _span = tracing::debug_span!("replay", graph = self.exec.0).entered();
        self.device
            .inner
            .raw
            .graph_launch(self.exec, self.device.inner.stream.handle)?;
        if self.device.inner.config.sync_launch {
            self.device.synchronize()?;
        }
        Ok(())
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // Replays already queued run before anything that reuses the arena (one stream).
        let raw = &self.device.inner.raw;
        if let Err(e) = raw
            .graph_exec_destroy(self.exec)
            .and_then(|()| raw.graph_destroy(self.graph))
        {
            tracing::warn!("destroying a graph failed: {e}");
        }
        self.device.inner.pool.release_graph(self.arena);
    }
}
