// llama.cpp's load of a GGUF file onto the GPU, timed as `candle-rocm-bench gguf --static` times
// the static llama's: from the call to the model on the device, twice in one process (the first
// warms the driver and the page cache; the second is the figure compared). One JSON line.
#include <chrono>
#include <cstdio>

#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: llama-load FILE.gguf\n");
        return 2;
    }
    llama_log_set(quiet, nullptr);
    ggml_backend_load_all();
    llama_backend_init();
    double seconds[2];
    for (double& s : seconds) {
        llama_model_params params = llama_model_default_params();
        params.n_gpu_layers = 999;
        auto start = std::chrono::steady_clock::now();
        llama_model* model = llama_model_load_from_file(argv[1], params);
        if (model == nullptr) {
            std::fprintf(stderr, "llama-load: %s did not load\n", argv[1]);
            return 1;
        }
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        llama_model_free(model);
    }
    std::printf("{\"first_load_s\": %.4f, \"load_s\": %.4f}\n", seconds[0], seconds[1]);
    llama_backend_free();
    return 0;
}
