//! MIOpen (miopen.h of ROCm 6.4): the functions candle-rocm calls and the enum values and
//! structs they take. The call sequence is rocm-dnn's (its `miopen` module).

use std::ffi::{c_char, c_void};

use crate::sys::library::{find_library, rocm_library_dirs, LibraryStatus};

/// An opaque MIOpen object (handle or descriptor).
pub type Ptr = *mut c_void;

/// MIOpen enum values and structs (miopen.h).
pub mod abi {
    use crate::abi::AbiValue;

    crate::abi_constants!(TABLE;
        MIOPEN_STATUS_SUCCESS: i32 = 0 => "miopenStatusSuccess";
        MIOPEN_HALF: i32 = 0 => "miopenHalf";
        MIOPEN_FLOAT: i32 = 1 => "miopenFloat";
        MIOPEN_BFLOAT16: i32 = 5 => "miopenBFloat16";
        MIOPEN_CONVOLUTION: i32 = 0 => "miopenConvolution";
        MIOPEN_TRANSPOSE: i32 = 1 => "miopenTranspose";
        MIOPEN_POOLING_MAX: i32 = 0 => "miopenPoolingMax";
        MIOPEN_POOLING_AVERAGE: i32 = 1 => "miopenPoolingAverage";
        /// The algorithm enums are ints (the union in `miopenConvAlgoPerf_t` is one int).
        ALGORITHM_ENUM_BYTES: usize = 4 => "sizeof(miopenConvFwdAlgorithm_t)";
    );

    /// `miopenConvSolution_t`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default)]
    pub struct ConvSolution {
        pub time: f32,
        pub workspace_size: usize,
        pub solution_id: u64,
        pub algorithm: i32,
    }

    /// `miopenConvAlgoPerf_t` (the union of algorithm enums is one int).
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default)]
    pub struct ConvAlgoPerf {
        pub algo: i32,
        pub time: f32,
        pub memory: usize,
    }

    pub const CONV_SOLUTION_LAYOUT: &[AbiValue] = crate::struct_layout!(
        ConvSolution,
        "miopenConvSolution_t",
        [
            time => "time",
            workspace_size => "workspace_size",
            solution_id => "solution_id",
            algorithm => "algorithm",
        ]
    );

    pub const CONV_ALGO_PERF_LAYOUT: &[AbiValue] = crate::struct_layout!(
        ConvAlgoPerf,
        "miopenConvAlgoPerf_t",
        [algo => "fwd_algo", time => "time", memory => "memory"]
    );

    /// Every table of MIOpen.
    pub const TABLES: &[&[AbiValue]] = &[TABLE, CONV_SOLUTION_LAYOUT, CONV_ALGO_PERF_LAYOUT];
    /// The header the tables' expressions need.
    pub const HEADERS: &[&str] = &["miopen/miopen.h"];
}

const ROLE: &str = "MIOpen (libMIOpen)";
const HINT: &str = "install MIOpen (Debian/Ubuntu: apt install libmiopen-dev, or the ROCm \
    packages), or set ROCM_PATH; CANDLE_ROCM_DISABLE_MIOPEN=1 uses the portable path";
/// The library names tried, unversioned first.
const NAMES: [&str; 2] = ["libMIOpen.so", "libMIOpen.so.1"];

/// Where MIOpen was looked for and found.
pub fn library_status() -> LibraryStatus {
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    find_library(ROLE, &names, &rocm_library_dirs(), HINT)
}

crate::ffi_table! {
    /// MIOpen's functions.
    pub struct Functions {
        create_with_stream = "miopenCreateWithStream": fn(*mut Ptr, Ptr) -> i32;
        destroy = "miopenDestroy": fn(Ptr) -> i32;
        error_string = "miopenGetErrorString": fn(i32) -> *const c_char;
        create_tensor = "miopenCreateTensorDescriptor": fn(*mut Ptr) -> i32;
        set_tensor = "miopenSetTensorDescriptor": fn(Ptr, i32, i32, *const i32, *const i32) -> i32;
        destroy_tensor = "miopenDestroyTensorDescriptor": fn(Ptr) -> i32;
        create_conv = "miopenCreateConvolutionDescriptor": fn(*mut Ptr) -> i32;
        init_conv = "miopenInitConvolutionNdDescriptor":
            fn(Ptr, i32, *const i32, *const i32, *const i32, i32) -> i32;
        set_group_count = "miopenSetConvolutionGroupCount": fn(Ptr, i32) -> i32;
        set_output_padding = "miopenSetTransposeConvNdOutputPadding": fn(Ptr, i32, *const i32) -> i32;
        conv_output_dim = "miopenGetConvolutionForwardOutputDim":
            fn(Ptr, Ptr, Ptr, *mut i32, *mut i32, *mut i32, *mut i32) -> i32;
        destroy_conv = "miopenDestroyConvolutionDescriptor": fn(Ptr) -> i32;
        fwd_solution_count = "miopenConvolutionForwardGetSolutionCount":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, *mut usize) -> i32;
        fwd_solution = "miopenConvolutionForwardGetSolution":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, usize, *mut usize, *mut abi::ConvSolution) -> i32;
        fwd_compile = "miopenConvolutionForwardCompileSolution": fn(Ptr, Ptr, Ptr, Ptr, Ptr, u64) -> i32;
        fwd_immediate = "miopenConvolutionForwardImmediate":
            fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, Ptr, Ptr, Ptr, Ptr, usize, u64) -> i32;
        bwd_solution_count = "miopenConvolutionBackwardDataGetSolutionCount":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, *mut usize) -> i32;
        bwd_solution = "miopenConvolutionBackwardDataGetSolution":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, usize, *mut usize, *mut abi::ConvSolution) -> i32;
        bwd_compile = "miopenConvolutionBackwardDataCompileSolution":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, u64) -> i32;
        bwd_immediate = "miopenConvolutionBackwardDataImmediate":
            fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, Ptr, Ptr, Ptr, Ptr, usize, u64) -> i32;
        fwd_workspace = "miopenConvolutionForwardGetWorkSpaceSize":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, *mut usize) -> i32;
        fwd_find = "miopenFindConvolutionForwardAlgorithm":
            fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, Ptr, Ptr, Ptr, i32, *mut i32,
               *mut abi::ConvAlgoPerf, Ptr, usize, bool) -> i32;
        fwd_run = "miopenConvolutionForward":
            fn(Ptr, *const c_void, Ptr, *const c_void, Ptr, *const c_void, Ptr, i32, *const c_void,
               Ptr, Ptr, Ptr, usize) -> i32;
        bwd_workspace = "miopenConvolutionBackwardDataGetWorkSpaceSize":
            fn(Ptr, Ptr, Ptr, Ptr, Ptr, *mut usize) -> i32;
        bwd_find = "miopenFindConvolutionBackwardDataAlgorithm":
            fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, Ptr, Ptr, Ptr, i32, *mut i32,
               *mut abi::ConvAlgoPerf, Ptr, usize, bool) -> i32;
        bwd_run = "miopenConvolutionBackwardData":
            fn(Ptr, *const c_void, Ptr, *const c_void, Ptr, *const c_void, Ptr, i32, *const c_void,
               Ptr, Ptr, Ptr, usize) -> i32;
        create_pool = "miopenCreatePoolingDescriptor": fn(*mut Ptr) -> i32;
        set_pool = "miopenSet2dPoolingDescriptor": fn(Ptr, i32, i32, i32, i32, i32, i32, i32) -> i32;
        pool_output_dim = "miopenGetPoolingForwardOutputDim":
            fn(Ptr, Ptr, *mut i32, *mut i32, *mut i32, *mut i32) -> i32;
        pool_forward = "miopenPoolingForward":
            fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, *const c_void, Ptr, Ptr, bool, Ptr, usize)
                -> i32;
        destroy_pool = "miopenDestroyPoolingDescriptor": fn(Ptr) -> i32;
    }
}
