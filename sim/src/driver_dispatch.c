/* Simulated libcuda (no GPU): the driver's call into the attached tool (libcupti) at an
 * API call's enter and exit, built without unwind tables and without a frame pointer
 * (sim/build.sh), as stretches of NVIDIA's libcuda are: a stack taken in a CUPTI
 * callback must cross this frame without an .eh_frame entry for it. It leaves rbp
 * alone. It does nothing else. */
#include "gpusim.h"

void gpusim_dispatch_api(void (*hook)(struct gpusim_api *), struct gpusim_api *c);

void gpusim_dispatch_api(void (*hook)(struct gpusim_api *), struct gpusim_api *c) {
    hook(c);
}
