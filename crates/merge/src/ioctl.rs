//! Ioctl command words, decoded and named.
//!
//! A command word packs `_IOC(dir, type, nr, size)`: the direction (bits
//! 30–31), the argument's size (bits 16–29), a type letter (bits 8–15) and a
//! number (bits 0–7). The driver chooses what to do by type and number, so
//! two words that differ only in direction or size (`0xc00046f0` and
//! `0x46f0`) are one ioctl: [`Ioctl`] keeps the type and number alone.
//!
//! Names come from two public tables, written here from their headers:
//! NVIDIA's escapes (type `'F'`; `nv-ioctl-numbers.h` and `nv_escape.h` of
//! NVIDIA's open GPU kernel modules) and the DRM core's generic ioctls (type
//! `'d'`, numbers below 0x40 and from 0xa0; `include/uapi/drm/drm.h`). Any
//! other is named by its type and number.
//!
//! ```
//! use gpuperf_merge::ioctl::Ioctl;
//! assert_eq!(Ioctl::from_cmd(0xc020_462a).name(), "NV_ESC_RM_CONTROL");
//! assert_eq!(Ioctl::from_cmd(0xc000_46f0), Ioctl::from_cmd(0x46f0));
//! assert_eq!(Ioctl::from_cmd(0x46f0).name(), "'F' 0xf0");
//! ```

use std::fmt;

/// NVIDIA's type letter (`NV_IOCTL_MAGIC`).
const NVIDIA: u8 = b'F';
/// The DRM core's type letter (`DRM_IOCTL_BASE`).
const DRM: u8 = b'd';

/// An ioctl as its driver tells it apart: type letter and number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ioctl {
    /// The type letter (`_IOC_TYPE`).
    pub kind: u8,
    /// The number (`_IOC_NR`).
    pub nr: u8,
}

impl Ioctl {
    /// The ioctl of command word `cmd`, whatever its direction and size.
    pub fn from_cmd(cmd: u32) -> Self {
        Self {
            kind: (cmd >> 8) as u8,
            nr: cmd as u8,
        }
    }

    /// Its name: the public one where the tables have it, else its type and
    /// number (`'F' 0xf0`).
    pub fn name(self) -> String {
        match self.known() {
            Some(n) => n.to_owned(),
            None => self.to_string(),
        }
    }

    /// Its public name, where the tables have it.
    pub fn known(self) -> Option<&'static str> {
        match self.kind {
            NVIDIA => nvidia(self.nr),
            DRM => drm(self.nr),
            _ => None,
        }
    }
}

/// `'F' 0xf0`: the type as a character when printable.
impl fmt::Display for Ioctl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind.is_ascii_graphic() {
            write!(f, "'{}' {:#04x}", self.kind as char, self.nr)
        } else {
            write!(f, "{:#04x} {:#04x}", self.kind, self.nr)
        }
    }
}

/// NVIDIA's escapes: the RM's (`NV_ESC_RM_*`, below 200) and the kernel
/// interface's (`NV_IOCTL_BASE` 200 and up).
fn nvidia(nr: u8) -> Option<&'static str> {
    Some(match nr {
        0x27 => "NV_ESC_RM_ALLOC_MEMORY",
        0x28 => "NV_ESC_RM_ALLOC_OBJECT",
        0x29 => "NV_ESC_RM_FREE",
        0x2a => "NV_ESC_RM_CONTROL",
        0x2b => "NV_ESC_RM_ALLOC",
        0x32 => "NV_ESC_RM_CONFIG_GET",
        0x33 => "NV_ESC_RM_CONFIG_SET",
        0x34 => "NV_ESC_RM_DUP_OBJECT",
        0x35 => "NV_ESC_RM_SHARE",
        0x37 => "NV_ESC_RM_CONFIG_GET_EX",
        0x38 => "NV_ESC_RM_CONFIG_SET_EX",
        0x39 => "NV_ESC_RM_I2C_ACCESS",
        0x41 => "NV_ESC_RM_IDLE_CHANNELS",
        0x4a => "NV_ESC_RM_VID_HEAP_CONTROL",
        0x4d => "NV_ESC_RM_ACCESS_REGISTRY",
        0x4e => "NV_ESC_RM_MAP_MEMORY",
        0x4f => "NV_ESC_RM_UNMAP_MEMORY",
        0x52 => "NV_ESC_RM_GET_EVENT_DATA",
        0x54 => "NV_ESC_RM_ALLOC_CONTEXT_DMA2",
        0x56 => "NV_ESC_RM_ADD_VBLANK_CALLBACK",
        0x57 => "NV_ESC_RM_MAP_MEMORY_DMA",
        0x58 => "NV_ESC_RM_UNMAP_MEMORY_DMA",
        0x59 => "NV_ESC_RM_BIND_CONTEXT_DMA",
        0x5c => "NV_ESC_RM_EXPORT_OBJECT_TO_FD",
        0x5d => "NV_ESC_RM_IMPORT_OBJECT_FROM_FD",
        0x5e => "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO",
        200 => "NV_ESC_CARD_INFO",
        201 => "NV_ESC_REGISTER_FD",
        206 => "NV_ESC_ALLOC_OS_EVENT",
        207 => "NV_ESC_FREE_OS_EVENT",
        209 => "NV_ESC_STATUS_CODE",
        210 => "NV_ESC_CHECK_VERSION_STR",
        211 => "NV_ESC_IOCTL_XFER_CMD",
        212 => "NV_ESC_ATTACH_GPUS_TO_FD",
        213 => "NV_ESC_QUERY_DEVICE_INTR",
        214 => "NV_ESC_SYS_PARAMS",
        217 => "NV_ESC_EXPORT_TO_DMABUF_FD",
        218 => "NV_ESC_WAIT_OPEN_COMPLETE",
        _ => return None,
    })
}

/// The DRM core's generic ioctls (0x40–0x9f are each driver's own).
fn drm(nr: u8) -> Option<&'static str> {
    Some(match nr {
        0x00 => "DRM_IOCTL_VERSION",
        0x01 => "DRM_IOCTL_GET_UNIQUE",
        0x02 => "DRM_IOCTL_GET_MAGIC",
        0x03 => "DRM_IOCTL_IRQ_BUSID",
        0x04 => "DRM_IOCTL_GET_MAP",
        0x05 => "DRM_IOCTL_GET_CLIENT",
        0x06 => "DRM_IOCTL_GET_STATS",
        0x07 => "DRM_IOCTL_SET_VERSION",
        0x08 => "DRM_IOCTL_MODESET_CTL",
        0x09 => "DRM_IOCTL_GEM_CLOSE",
        0x0a => "DRM_IOCTL_GEM_FLINK",
        0x0b => "DRM_IOCTL_GEM_OPEN",
        0x0c => "DRM_IOCTL_GET_CAP",
        0x0d => "DRM_IOCTL_SET_CLIENT_CAP",
        0x10 => "DRM_IOCTL_SET_UNIQUE",
        0x11 => "DRM_IOCTL_AUTH_MAGIC",
        0x12 => "DRM_IOCTL_BLOCK",
        0x13 => "DRM_IOCTL_UNBLOCK",
        0x14 => "DRM_IOCTL_CONTROL",
        0x15 => "DRM_IOCTL_ADD_MAP",
        0x16 => "DRM_IOCTL_ADD_BUFS",
        0x17 => "DRM_IOCTL_MARK_BUFS",
        0x18 => "DRM_IOCTL_INFO_BUFS",
        0x19 => "DRM_IOCTL_MAP_BUFS",
        0x1a => "DRM_IOCTL_FREE_BUFS",
        0x1b => "DRM_IOCTL_RM_MAP",
        0x1c => "DRM_IOCTL_SET_SAREA_CTX",
        0x1d => "DRM_IOCTL_GET_SAREA_CTX",
        0x1e => "DRM_IOCTL_SET_MASTER",
        0x1f => "DRM_IOCTL_DROP_MASTER",
        0x20 => "DRM_IOCTL_ADD_CTX",
        0x21 => "DRM_IOCTL_RM_CTX",
        0x22 => "DRM_IOCTL_MOD_CTX",
        0x23 => "DRM_IOCTL_GET_CTX",
        0x24 => "DRM_IOCTL_SWITCH_CTX",
        0x25 => "DRM_IOCTL_NEW_CTX",
        0x26 => "DRM_IOCTL_RES_CTX",
        0x27 => "DRM_IOCTL_ADD_DRAW",
        0x28 => "DRM_IOCTL_RM_DRAW",
        0x29 => "DRM_IOCTL_DMA",
        0x2a => "DRM_IOCTL_LOCK",
        0x2b => "DRM_IOCTL_UNLOCK",
        0x2c => "DRM_IOCTL_FINISH",
        0x2d => "DRM_IOCTL_PRIME_HANDLE_TO_FD",
        0x2e => "DRM_IOCTL_PRIME_FD_TO_HANDLE",
        0x30 => "DRM_IOCTL_AGP_ACQUIRE",
        0x31 => "DRM_IOCTL_AGP_RELEASE",
        0x32 => "DRM_IOCTL_AGP_ENABLE",
        0x33 => "DRM_IOCTL_AGP_INFO",
        0x34 => "DRM_IOCTL_AGP_ALLOC",
        0x35 => "DRM_IOCTL_AGP_FREE",
        0x36 => "DRM_IOCTL_AGP_BIND",
        0x37 => "DRM_IOCTL_AGP_UNBIND",
        0x38 => "DRM_IOCTL_SG_ALLOC",
        0x39 => "DRM_IOCTL_SG_FREE",
        0x3a => "DRM_IOCTL_WAIT_VBLANK",
        0x3f => "DRM_IOCTL_UPDATE_DRAW",
        0xa0 => "DRM_IOCTL_MODE_GETRESOURCES",
        0xa1 => "DRM_IOCTL_MODE_GETCRTC",
        0xa2 => "DRM_IOCTL_MODE_SETCRTC",
        0xa3 => "DRM_IOCTL_MODE_CURSOR",
        0xa4 => "DRM_IOCTL_MODE_GETGAMMA",
        0xa5 => "DRM_IOCTL_MODE_SETGAMMA",
        0xa6 => "DRM_IOCTL_MODE_GETENCODER",
        0xa7 => "DRM_IOCTL_MODE_GETCONNECTOR",
        0xa8 => "DRM_IOCTL_MODE_ATTACHMODE",
        0xa9 => "DRM_IOCTL_MODE_DETACHMODE",
        0xaa => "DRM_IOCTL_MODE_GETPROPERTY",
        0xab => "DRM_IOCTL_MODE_SETPROPERTY",
        0xac => "DRM_IOCTL_MODE_GETPROPBLOB",
        0xad => "DRM_IOCTL_MODE_GETFB",
        0xae => "DRM_IOCTL_MODE_ADDFB",
        0xaf => "DRM_IOCTL_MODE_RMFB",
        0xb0 => "DRM_IOCTL_MODE_PAGE_FLIP",
        0xb1 => "DRM_IOCTL_MODE_DIRTYFB",
        0xb2 => "DRM_IOCTL_MODE_CREATE_DUMB",
        0xb3 => "DRM_IOCTL_MODE_MAP_DUMB",
        0xb4 => "DRM_IOCTL_MODE_DESTROY_DUMB",
        0xb5 => "DRM_IOCTL_MODE_GETPLANERESOURCES",
        0xb6 => "DRM_IOCTL_MODE_GETPLANE",
        0xb7 => "DRM_IOCTL_MODE_SETPLANE",
        0xb8 => "DRM_IOCTL_MODE_ADDFB2",
        0xb9 => "DRM_IOCTL_MODE_OBJ_GETPROPERTIES",
        0xba => "DRM_IOCTL_MODE_OBJ_SETPROPERTY",
        0xbb => "DRM_IOCTL_MODE_CURSOR2",
        0xbc => "DRM_IOCTL_MODE_ATOMIC",
        0xbd => "DRM_IOCTL_MODE_CREATEPROPBLOB",
        0xbe => "DRM_IOCTL_MODE_DESTROYPROPBLOB",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_and_size_do_not_make_another_ioctl() {
        // _IOWR('F', 0xf0, 0) against _IO('F', 0xf0).
        assert_eq!(Ioctl::from_cmd(0xc000_46f0), Ioctl::from_cmd(0x46f0));
        assert_eq!(
            Ioctl::from_cmd(0xc000_46f0),
            Ioctl {
                kind: b'F',
                nr: 0xf0
            }
        );
        // _IOWR('F', 0x2a, char[16]) against _IOWR('F', 0x2a, NVOS54_PARAMETERS).
        assert_eq!(Ioctl::from_cmd(0xc010_462a), Ioctl::from_cmd(0xc020_462a));
        assert_ne!(Ioctl::from_cmd(0x462a), Ioctl::from_cmd(0x642a));
    }

    #[test]
    fn nvidia_and_drm_ioctls_are_named_others_by_type_and_number() {
        let name = |cmd| Ioctl::from_cmd(cmd).name();
        assert_eq!(name(0xc010_462a), "NV_ESC_RM_CONTROL");
        assert_eq!(name(0xc020_462b), "NV_ESC_RM_ALLOC");
        // _IOWR('F', NV_IOCTL_BASE + 0, ...).
        assert_eq!(name(0xc900_46c8), "NV_ESC_CARD_INFO");
        assert_eq!(name(0xc018_643a), "DRM_IOCTL_WAIT_VBLANK");
        assert_eq!(name(0xc018_64b0), "DRM_IOCTL_MODE_PAGE_FLIP");
        // A driver's own DRM ioctl (vgem's fence attach) and the simulated
        // driver's interrupt command.
        assert_eq!(name(0xc010_6441), "'d' 0x41");
        assert_eq!(name(0x46f1), "'F' 0xf1");
        assert_eq!(name(0x0001), "0x00 0x01");
    }
}
