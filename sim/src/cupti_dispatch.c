/* Simulated CUPTI (no GPU): the delivery of an API callback to the subscriber, built
 * without unwind tables and without a frame pointer (sim/build.sh), as stretches of
 * NVIDIA's libcupti and libcuda are: a stack taken inside the callback must cross this
 * frame without an .eh_frame entry for it. It also keeps a data pointer in rbp across
 * the call, as code built without frame pointers may use rbp like any other register,
 * so that rbp cannot be taken for a frame pointer here. It does nothing else. */
#include <cupti.h>

#include "gpusim.h"

void gpusim_cupti_deliver(CUpti_CallbackFunc cb, void *userdata, const struct gpusim_api *c,
                          CUpti_ApiCallbackSite site);

void gpusim_cupti_deliver(CUpti_CallbackFunc cb, void *userdata, const struct gpusim_api *c,
                          CUpti_ApiCallbackSite site) {
    CUpti_CallbackData d = {
        .callbackSite = site,
        .functionName = c->name,
        .functionParams = c->params,
        .functionReturnValue = c->ret,
        .symbolName = c->symbol,
        .context = (CUcontext)c->context,
        .contextUid = c->context_id,
        .correlationData = (uint64_t *)&c->correlation_data,
        .correlationId = c->correlation_id,
    };
    /* rbp holds the callback data's address during the call (the compiler saves
       and restores the caller's rbp, which is callee-saved). */
    __asm__ volatile("mov %0, %%rbp" : : "r"(&d) : "rbp", "memory");
    cb(userdata, (CUpti_CallbackDomain)c->domain, (CUpti_CallbackId)c->cbid, &d);
}
