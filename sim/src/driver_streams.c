/* Simulated CUDA driver, libcuda.so.1 (no GPU): the driver API for streams and
 * events. See driver_internal.h for what the other driver_*.c files hold. */
#include "driver_internal.h"

/* Streams --------------------------------------------------------------------- */

static CUresult create_stream(CUstream *ph, unsigned flags, int priority) {
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = new_stream(c, flags, priority, 0);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_resource(CUPTI_CBID_RESOURCE_STREAM_CREATED, c, s);
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

DRV(cuStreamCreate, (CUstream *ph, unsigned int flags), (ph, flags)) {
    ENTER(cuStreamCreate, ph, flags);
    RETURN(create_stream(ph, flags, 0));
}

DRV(cuStreamCreateWithPriority, (CUstream *ph, unsigned int flags, int priority), (ph, flags, priority)) {
    ENTER(cuStreamCreateWithPriority, ph, flags, priority);
    RETURN(create_stream(ph, flags, priority));
}

DRV(cuStreamDestroy, (CUstream h), (h)) {
    ENTER(cuStreamDestroy, h);
    struct stream *s = resolve_stream(h);
    if (!s || s->legacy || h == CU_STREAM_PER_THREAD)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    report_resource(CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, s->ctx, s);
    /* Work already queued still runs; the handle dies now. Its tail stays in the
     * device's list so that the legacy stream keeps ordering after it. */
    s->magic = 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamSynchronize, (CUstream h), (h)) {
    ENTER(cuStreamSynchronize, h);
    struct stream *s = resolve_stream(h);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (s->capture)
        RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    uint64_t t0 = now_ns();
    sleep_until(stream_done_time(s));
    waited_for_stream(s);
    wait_host_fns();
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, t0, &call_, s->ctx, s, NULL);
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamQuery, (CUstream h), (h)) {
    ENTER(cuStreamQuery, h);
    struct stream *s = resolve_stream(h);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(now_ns() >= stream_done_time(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

DRV(cuStreamGetPriority, (CUstream h, int *p), (h, p)) {
    ENTER(cuStreamGetPriority, h, p);
    struct stream *s = resolve_stream(h);
    if (!s || !p)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *p = s->priority;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamGetFlags, (CUstream h, unsigned int *f), (h, f)) {
    ENTER(cuStreamGetFlags, h, f);
    struct stream *s = resolve_stream(h);
    if (!s || !f)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *f = s->flags;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamGetId, (CUstream h, unsigned long long *id), (h, id)) {
    ENTER(cuStreamGetId, h, id);
    struct stream *s = resolve_stream(h);
    if (!s || !id)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *id = s->id;
    RETURN(CUDA_SUCCESS);
}

/* Events ---------------------------------------------------------------------- */

static struct event *as_event(CUevent h) {
    struct event *e = (struct event *)h;
    return e && e->magic == MAGIC_EVENT ? e : NULL;
}

DRV(cuEventCreate, (CUevent *ph, unsigned int flags), (ph, flags)) {
    ENTER(cuEventCreate, ph, flags);
    if (!ph)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct ctx *c = current_ctx();
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct event *e = calloc(1, sizeof *e);
    if (!e)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    e->magic = MAGIC_EVENT;
    e->id = atomic_fetch_add(&g_next_event, 1);
    e->flags = flags;
    e->ctx = c;
    *ph = (CUevent)e;
    RETURN(CUDA_SUCCESS);
}

DRV(cuEventDestroy, (CUevent h), (h)) {
    ENTER(cuEventDestroy, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    e->magic = 0;
    free(e);
    RETURN(CUDA_SUCCESS);
}

/* An event completes when the work queued before it on its stream is done, or at
 * the record call when the stream is idle. */
static CUresult event_record(CUevent h, CUstream hs) {
    struct event *e = as_event(h);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture) {
        /* Ordering inside a capture is the node order; a stream that waits on
         * this event joins the capture. */
        e->capture_id = s->capture->capture_id;
        return CUDA_SUCCESS;
    }
    e->capture_id = 0;
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = ready_time(s), now = now_ns();
    /* An event is work of no duration: on the device clock, it completes where
     * the next work on its stream could start. */
    e->vtime = device_start(s);
    pthread_mutex_unlock(&s->ctx->dev->mu);
    e->time = t > now ? t : now;
    e->recorded = 1;
    return CUDA_SUCCESS;
}

DRV(cuEventRecord, (CUevent h, CUstream s), (h, s)) {
    ENTER(cuEventRecord, h, s);
    RETURN(event_record(h, s));
}

DRV(cuEventRecordWithFlags, (CUevent h, CUstream s, unsigned int flags), (h, s, flags)) {
    ENTER(cuEventRecordWithFlags, h, s, flags);
    RETURN(event_record(h, s));
}

DRV(cuEventQuery, (CUevent h), (h)) {
    ENTER(cuEventQuery, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(!e->recorded || now_ns() >= e->time ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

DRV(cuEventSynchronize, (CUevent h), (h)) {
    ENTER(cuEventSynchronize, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    uint64_t t0 = now_ns();
    if (e->recorded) {
        sleep_until(e->time);
        vhost_reaches(e->vtime);
    }
    wait_host_fns();
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, t0, &call_, e->ctx, NULL, e);
    RETURN(CUDA_SUCCESS);
}

static CUresult elapsed(float *ms, CUevent a, CUevent b) {
    struct event *x = as_event(a), *y = as_event(b);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!x || !y)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!x->recorded || !y->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = now_ns();
    if (now < x->time || now < y->time)
        return CUDA_ERROR_NOT_READY;
    /* The device clock's difference: the same on every run. */
    *ms = (float)((double)((int64_t)y->vtime - (int64_t)x->vtime) / 1e6);
    return CUDA_SUCCESS;
}

DRV(cuEventElapsedTime, (float *ms, CUevent a, CUevent b), (ms, a, b)) {
    ENTER(cuEventElapsedTime, ms, a, b);
    RETURN(elapsed(ms, a, b));
}

DRV(cuStreamWaitEvent, (CUstream hs, CUevent h, unsigned int flags), (hs, h, flags)) {
    ENTER(cuStreamWaitEvent, hs, h, flags);
    struct stream *s = resolve_stream(hs);
    struct event *e = as_event(h);
    if (!s || !e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    uint64_t t0 = now_ns();
    /* The capture the event was recorded in, if it is still going on: the
     * streams capturing into it hold its graph. */
    if (e->capture_id && !s->capture && !s->legacy) {
        struct graph *g = NULL;
        pthread_mutex_lock(&s->ctx->dev->mu);
        for (struct stream *x = s->ctx->dev->streams; x && !g; x = x->next)
            if (x->magic == MAGIC_STREAM && x->capture && x->capture->capture_id == e->capture_id)
                g = x->capture;
        pthread_mutex_unlock(&s->ctx->dev->mu);
        if (g) {
            s->capture = g;
            s->capture_origin = 0;
        }
    }
    if (e->recorded && !s->capture) {
        pthread_mutex_lock(&s->ctx->dev->mu);
        if (e->time > s->tail)
            s->tail = e->time;
        if (e->vtime > s->vtail)
            s->vtail = e->vtime;
        pthread_mutex_unlock(&s->ctx->dev->mu);
    }
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, t0, &call_, s->ctx, s, e);
    RETURN(CUDA_SUCCESS);
}
