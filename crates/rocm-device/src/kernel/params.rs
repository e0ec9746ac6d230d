//! Typed kernel parameters. A kernel's parameter list is declared once, in Rust, with
//! [`kernel_params!`](crate::kernel_params): the declaration gives the host a struct whose
//! fields are pushed in the declared order ([`KernelParams::push_to`]) and gives the kernel
//! source the same list as a C macro (`#define ROPE_PARAMS(T) const T* x, ...`), which the
//! runtime puts before the module's source and the `.hip` entries take as their parameter
//! list. A launch that names a field wrongly does not build, and an entry cannot take its
//! arguments in another order than the host pushes them. [`Entry`] names a kernel of a module
//! with its parameter type, so a launch names neither by a string.

use std::marker::PhantomData;

use super::KernelModule;

/// A device address and the identity of the device handle its memory belongs to (checked at
/// launch against the launching device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr {
    pub addr: u64,
    pub device: usize,
}

/// Where a launch's arguments go (the runtime's argument list).
pub trait ArgSink {
    /// A plain value, passed by value.
    fn scalar<T: bytemuck::Pod>(&mut self, value: T);
    /// A device address.
    fn pointer(&mut self, ptr: DevicePtr);
}

/// A type a kernel parameter may have on the host, and its C spelling.
pub trait KernelArg {
    /// The C type of the parameter where the declaration names none.
    const C_TYPE: &'static str;
    fn push_to<S: ArgSink>(&self, sink: &mut S);
}

macro_rules! scalar_args {
    ($($t:ty = $c:literal),*) => {$(
        impl KernelArg for $t {
            const C_TYPE: &'static str = $c;
            fn push_to<S: ArgSink>(&self, sink: &mut S) {
                sink.scalar(*self);
            }
        }
    )*};
}
scalar_args!(
    u32 = "u32",
    u64 = "u64",
    i32 = "i32",
    i64 = "i64",
    f32 = "float",
    f64 = "double"
);

impl KernelArg for super::KernelLayout {
    const C_TYPE: &'static str = "KernelLayout";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        sink.scalar(*self);
    }
}

impl KernelArg for DevicePtr {
    const C_TYPE: &'static str = "const void*";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        sink.pointer(*self);
    }
}

/// An optional device address: `None` passes a null pointer (a kernel's "not given").
impl KernelArg for Option<DevicePtr> {
    const C_TYPE: &'static str = "const void*";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        match self {
            Some(ptr) => sink.pointer(*ptr),
            None => sink.scalar(0u64),
        }
    }
}

/// A parameter list declared by [`kernel_params!`](crate::kernel_params), as the module
/// source sees it: the C macro's name and parameters (`ROPE_PARAMS(T)`) and each field's name
/// and C type in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamsDecl {
    pub macro_head: &'static str,
    pub fields: &'static [(&'static str, &'static str)],
}

impl ParamsDecl {
    /// `#define <macro_head> <type> <name>, ...`.
    pub fn define(&self) -> String {
        let list: Vec<String> = self
            .fields
            .iter()
            .map(|(name, ty)| format!("{ty} {name}"))
            .collect();
        format!("#define {} {}", self.macro_head, list.join(", "))
    }

    /// The macro's name (`ROPE_PARAMS`).
    pub fn macro_name(&self) -> &'static str {
        self.macro_head
            .split_once('(')
            .map_or(self.macro_head, |(name, _)| name)
    }
}

/// A kernel's parameters as a host struct (see [`kernel_params!`](crate::kernel_params)).
pub trait KernelParams {
    const DECL: ParamsDecl;
    /// Pushes every field, in the declared order.
    fn push_to<S: ArgSink>(&self, sink: &mut S);
}

/// A kernel of `module` whose entries `<op>_<key>` take the parameters `P`.
#[derive(Debug)]
pub struct Entry<P> {
    pub module: &'static KernelModule,
    pub op: &'static str,
    params: PhantomData<fn(P)>,
}

impl<P> Clone for Entry<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for Entry<P> {}

impl<P: KernelParams> Entry<P> {
    pub const fn new(module: &'static KernelModule, op: &'static str) -> Self {
        Entry {
            module,
            op,
            params: PhantomData,
        }
    }
}

/// Kernels of one parameter list named `<prefix>_<part>_...` by the dtypes of some operands
/// (`gather_<ids dtype>`, `cast_<from>`): the entry is picked at run time from those parts, its
/// parameter list is fixed by the declaration.
#[derive(Debug)]
pub struct Family<P> {
    pub module: &'static KernelModule,
    pub prefix: &'static str,
    params: PhantomData<fn(P)>,
}

impl<P> Clone for Family<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for Family<P> {}

impl<P: KernelParams> Family<P> {
    pub const fn new(module: &'static KernelModule, prefix: &'static str) -> Self {
        Family {
            module,
            prefix,
            params: PhantomData,
        }
    }

    /// The entry `<prefix>_<parts[0]>_...`, if the module has one of that name.
    pub fn entry(&self, parts: &[&str]) -> Option<Entry<P>> {
        let name = std::iter::once(self.prefix).chain(parts.iter().copied());
        self.module
            .op_spelled(name)
            .map(|op| Entry::new(self.module, op))
    }
}

/// Declares a kernel's parameter list once: a host struct with one public field per parameter
/// (pushed in order) and the C macro the kernel source's entries take:
///
/// ```text
/// rocm_device::kernel_params! {
///     /// The rotary embeddings' parameters.
///     pub struct Params = "ROPE_PARAMS(T)" {
///         x: DevicePtr = "const T*",
///         d: u64,
///     }
/// }
/// ```
///
/// A field's C type is the given string, else its host type's [`KernelArg::C_TYPE`].
#[macro_export]
macro_rules! kernel_params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident = $head:literal {
            $($(#[$fmeta:meta])* $field:ident: $ty:ty $(= $cty:literal)?),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::kernel::params::KernelParams for $name {
            const DECL: $crate::kernel::params::ParamsDecl = $crate::kernel::params::ParamsDecl {
                macro_head: $head,
                fields: &[$((
                    stringify!($field),
                    $crate::kernel_params!(@c_type $ty $(, $cty)?),
                )),*],
            };
            fn push_to<S: $crate::kernel::params::ArgSink>(&self, sink: &mut S) {
                $($crate::kernel::params::KernelArg::push_to(&self.$field, sink);)*
            }
        }
    };
    (@c_type $ty:ty, $cty:literal) => { $cty };
    (@c_type $ty:ty) => { <$ty as $crate::kernel::params::KernelArg>::C_TYPE };
}

/// A family's op list, declared once: the enum, `ALL` (its variants in order), `NAMES` (the
/// kernels' op names, in the same order) and `name()`.
///
/// ```
/// rocm_device::op_list! {
///     /// Two ops.
///     pub enum Op { Add = "add", Sub = "sub" }
/// }
/// assert_eq!(Op::ALL, [Op::Add, Op::Sub]);
/// assert_eq!(Op::Sub.name(), "sub");
/// assert_eq!(Op::NAMES, ["add", "sub"]);
/// ```
#[macro_export]
macro_rules! op_list {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every op, in the kernels' order.
            pub const ALL: [$name; [$($text),*].len()] = [$($name::$variant),*];
            /// The kernels' op names, in the same order.
            pub const NAMES: [&'static str; [$($text),*].len()] = [$($text),*];

            /// The kernels' op name (and Candle's, where Candle has the op).
            pub const fn name(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }
    };
}

/// `a` then `b`, in a constant (op lists that extend another's).
pub const fn concat_names<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "concat_names: the lengths do not add up");
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::kernel_params! {
        /// A test list.
        struct Sample = "SAMPLE_PARAMS(T)" {
            src: DevicePtr = "const T*",
            n: u64,
            scale: f32,
            layout: crate::kernel::KernelLayout,
        }
    }

    #[derive(Default)]
    struct Recorded(Vec<String>);

    impl ArgSink for Recorded {
        fn scalar<T: bytemuck::Pod>(&mut self, value: T) {
            self.0
                .push(format!("{} bytes", bytemuck::bytes_of(&value).len()));
        }
        fn pointer(&mut self, ptr: DevicePtr) {
            self.0
                .push(format!("ptr {:#x} on {}", ptr.addr, ptr.device));
        }
    }

    #[test]
    fn one_declaration_gives_the_c_list_and_the_push_order() {
        assert_eq!(
            Sample::DECL.define(),
            "#define SAMPLE_PARAMS(T) const T* src, u64 n, float scale, KernelLayout layout"
        );
        assert_eq!(Sample::DECL.macro_name(), "SAMPLE_PARAMS");
        let layout = crate::kernel::KernelLayout::new(&[4], &[1], 0).unwrap();
        let sample = Sample {
            src: DevicePtr {
                addr: 0x100,
                device: 7,
            },
            n: 3,
            scale: 0.5,
            layout,
        };
        let mut sink = Recorded::default();
        sample.push_to(&mut sink);
        let layout_bytes = format!(
            "{} bytes",
            std::mem::size_of::<crate::kernel::KernelLayout>()
        );
        assert_eq!(
            sink.0,
            [
                "ptr 0x100 on 7",
                "8 bytes",
                "4 bytes",
                layout_bytes.as_str()
            ]
        );
    }
}
