/* SPDX-License-Identifier: GPL-2.0 */
/* Simulated: NVIDIA's nvidia:nvidia_dev_xid tracepoint, same name, arguments
 * (the device's pci_dev, error code, message) and fields (dev, error_code,
 * msg), fired on request by the stand-in driver. */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM nvidia

#if !defined(_NVIDIA_SIM_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _NVIDIA_SIM_TRACE_H

#include <linux/pci.h>
#include <linux/tracepoint.h>
#include <linux/version.h>

TRACE_EVENT(nvidia_dev_xid,
	TP_PROTO(const struct pci_dev *pdev, u32 error_code, const char *msg),
	TP_ARGS(pdev, error_code, msg),
	TP_STRUCT__entry(
		__string(dev, pci_name(pdev))
		__field(u32, error_code)
		__string(msg, msg)
	),
	TP_fast_assign(
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
		__assign_str(dev);
		__assign_str(msg);
#else
		__assign_str(dev, pci_name(pdev));
		__assign_str(msg, msg);
#endif
		__entry->error_code = error_code;
	),
	TP_printk("Xid (PCI:%s): %u, %s", __get_str(dev), __entry->error_code, __get_str(msg))
);

#endif

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE nvidia_sim_trace
#include <trace/define_trace.h>
