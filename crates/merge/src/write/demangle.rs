//! Kernel and frame names demangled and labelled once per interned name, for
//! the writers.

use crate::model::{StringId, StringTable};
use crate::view::{FullNames, View, demangle};

/// Caches demangled names by [`StringId`], so each distinct name is demangled once,
/// and their labels in a [`View`].
#[derive(Default)]
pub(crate) struct Demangler {
    cache: Vec<Option<Box<str>>>,
    labels: Vec<Option<Box<str>>>,
    full_names: FullNames,
}

impl Demangler {
    /// The demangled form of `id`, with `;` (the folded separator) replaced.
    pub(crate) fn get<'s>(&'s mut self, id: StringId, strings: &StringTable) -> &'s str {
        let i = id.index();
        if self.cache.len() <= i {
            self.cache.resize(i + 1, None);
        }
        self.cache[i]
            .get_or_insert_with(|| demangle(strings.get(id)).replace(';', ":").into_boxed_str())
    }

    /// The demangled form of `id` as `view` shows it (one view per demangler).
    pub(crate) fn label<'s>(
        &'s mut self,
        id: StringId,
        strings: &StringTable,
        view: View,
    ) -> &'s str {
        if view.is_complete() {
            return self.get(id, strings);
        }
        let i = id.index();
        if self.labels.len() <= i {
            self.labels.resize(i + 1, None);
        }
        if self.labels[i].is_none() {
            let full = self.get(id, strings).to_owned();
            let label = view.name(&full).into_owned();
            self.full_names.note(&label, &full);
            self.labels[i] = Some(label.into_boxed_str());
        }
        self.labels[i].as_deref().expect("set above")
    }

    /// The full names of the labels [`Demangler::label`] shortened.
    pub(crate) fn full_names(&self) -> &FullNames {
        &self.full_names
    }
}
