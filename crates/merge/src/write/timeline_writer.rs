//! The one [`Sink`] behind both timeline outputs: it builds the timeline model
//! (`write/timeline/`) from what the join streams and, when the join
//! finishes, hands it to its format's encoder. [`crate::write::chrome::Writer`]
//! and [`crate::write::perfetto::Writer`] are this type with their format.

use std::io::Write;
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::Record;
use crate::read::cpu::CpuLaunch;
use crate::read::driver::DriverTrace;
use crate::write::timeline::{Builder, Timeline};

/// Encodes a finished timeline into `out` and flushes it, adding the bytes it
/// writes to `written` as it goes.
pub(crate) type Encode<W> = fn(&Timeline, &mut W, &mut u64) -> std::io::Result<()>;

/// Writes the timeline of what the join streams in the format `F`; a
/// [`Sink`]. The events are written when the join finishes.
pub struct TimelineWriter<W: Write, F> {
    out: W,
    model: Builder,
    encode: Encode<W>,
    /// What the errors call the output.
    what: &'static str,
    written: u64,
    format: PhantomData<F>,
}

impl<W: Write, F> TimelineWriter<W, F> {
    /// A writer whose prologue, if any, is already in `out`.
    pub(crate) fn with_encoder(out: W, what: &'static str, encode: Encode<W>) -> Self {
        Self {
            out,
            model: Builder::new(),
            encode,
            what,
            written: 0,
            format: PhantomData,
        }
    }

    /// Also draws the streams' and devices' idle time.
    pub fn with_idle_slices(mut self) -> Self {
        self.model = self.model.with_idle_slices();
        self
    }

    /// Also draws a recording's GPU driver events (see [`crate::write::driver`]).
    pub fn with_driver(mut self, trace: DriverTrace) -> Self {
        self.model = self.model.with_driver(trace);
        self
    }

    /// Returns the underlying stream (after the join has finished the trace).
    pub fn into_inner(self) -> W {
        self.out
    }

    /// The error for a failed write of this output.
    pub(crate) fn write_error(&self, source: std::io::Error) -> Error {
        Error::Write {
            what: self.what,
            source,
        }
    }
}

impl<W: Write, F> Sink for TimelineWriter<W, F> {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        self.model.record(ctx, rec, m)
    }

    fn pending(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.model.pending(ctx, launch, api)
    }

    fn captured(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.model.captured(ctx, launch, api)
    }

    fn finish(&mut self, ctx: &Context<'_>, summary: &Summary) -> Result<()> {
        self.model.finish(ctx, summary)?;
        let Some(t) = self.model.take() else {
            return Ok(());
        };
        (self.encode)(&t, &mut self.out, &mut self.written).map_err(|e| self.write_error(e))
    }
}
