//! Interned strings: [`StringId`] and the [`StringTable`] that owns them.

/// An interned string: a kernel name, an API name, a stack frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringId(pub(crate) u32);

impl StringId {
    /// The id as an index into its [`StringTable`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Interns strings so that records carry 4-byte ids instead of names.
#[derive(Debug, Default, Clone)]
pub struct StringTable {
    // Names come in by the million from big traces: a fast hash matters here.
    map: rustc_hash::FxHashMap<Box<str>, StringId>,
    strings: Vec<Box<str>>,
}

impl StringTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `s`, adding it on first sight.
    pub fn intern(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = StringId(u32::try_from(self.strings.len()).expect("fewer than 2^32 strings"));
        self.strings.push(s.into());
        self.map.insert(s.into(), id);
        id
    }

    /// The id of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<StringId> {
        self.map.get(s).copied()
    }

    /// The string behind `id`.
    ///
    /// # Panics
    /// If `id` came from another table.
    pub fn get(&self, id: StringId) -> &str {
        &self.strings[id.index()]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table holds no string.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}
