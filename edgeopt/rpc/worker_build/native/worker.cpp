// edgeopt's RPC worker: llama.cpp's own RPC server (ggml_backend_rpc_start_server) over this machine's
// devices, each capped to --mem MiB. The stock rpc-server of this llama.cpp version has no cap: a worker
// would report, and let the head fill, all of the host's memory. The cap wraps each device so that
//   - GET_DEVICE_MEMORY answers the cap (what the head and `edgeopt plan --workers` see), and
//   - buffer allocations past the cap fail, so a head that asks for more gets a load error, not an OOM.
// Binding, the protocol and the compute are llama.cpp's; `edgeopt worker` decides the address and refuses
// non-loopback hosts unless told why (the protocol carries no authentication).
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#include "ggml-rpc.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

struct capped_device {
    ggml_backend_device wrapper;  // a copy of the real device (its context too) with three functions replaced
    ggml_backend_dev_t real;
    ggml_backend_buffer_type capped_buft;
    size_t cap_bytes;
    std::atomic<size_t> used_bytes{0};
    std::mutex mutex;
    std::unordered_map<ggml_backend_buffer_t, void (*)(ggml_backend_buffer_t)> real_free;
};

// Filled before the server starts, read-only afterwards.
std::unordered_map<ggml_backend_dev_t, capped_device *> g_capped;

capped_device * from_dev(ggml_backend_dev_t dev) { return g_capped.at(dev); }
capped_device * from_buft(ggml_backend_buffer_type_t buft) { return static_cast<capped_device *>(buft->context); }

std::unordered_map<ggml_backend_buffer_t, capped_device *> g_owner;
std::mutex g_owner_mutex;

void capped_free_buffer(ggml_backend_buffer_t buffer) {
    capped_device * cap = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_owner_mutex);
        auto it = g_owner.find(buffer);
        if (it != g_owner.end()) { cap = it->second; g_owner.erase(it); }
    }
    GGML_ASSERT(cap != nullptr);
    void (*real_free)(ggml_backend_buffer_t) = nullptr;
    {
        std::lock_guard<std::mutex> lock(cap->mutex);
        real_free = cap->real_free[buffer];
        cap->real_free.erase(buffer);
    }
    cap->used_bytes -= buffer->size;
    if (real_free) {
        real_free(buffer);
    }
}

ggml_backend_buffer_t capped_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    capped_device * cap = from_buft(buft);
    if (cap->used_bytes + size > cap->cap_bytes) {
        fprintf(stderr, "edgeopt-rpc-worker: refused a %zu MiB buffer: %zu of %zu MiB already used (--mem)\n",
                size >> 20, cap->used_bytes.load() >> 20, cap->cap_bytes >> 20);
        return nullptr;
    }
    ggml_backend_buffer_type_t real_buft = ggml_backend_dev_buffer_type(cap->real);
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(real_buft, size);
    if (buffer == nullptr) {
        return nullptr;
    }
    cap->used_bytes += buffer->size;
    {
        std::lock_guard<std::mutex> lock(cap->mutex);
        cap->real_free[buffer] = buffer->iface.free_buffer;
    }
    {
        std::lock_guard<std::mutex> lock(g_owner_mutex);
        g_owner[buffer] = cap;
    }
    buffer->iface.free_buffer = capped_free_buffer;
    return buffer;
}

const char * capped_buft_name(ggml_backend_buffer_type_t buft) {
    return ggml_backend_buft_name(ggml_backend_dev_buffer_type(from_buft(buft)->real));
}
size_t capped_buft_alignment(ggml_backend_buffer_type_t buft) {
    return ggml_backend_buft_get_alignment(ggml_backend_dev_buffer_type(from_buft(buft)->real));
}
size_t capped_buft_max_size(ggml_backend_buffer_type_t buft) {
    return ggml_backend_buft_get_max_size(ggml_backend_dev_buffer_type(from_buft(buft)->real));
}
size_t capped_buft_alloc_size(ggml_backend_buffer_type_t buft, const ggml_tensor * tensor) {
    return ggml_backend_buft_get_alloc_size(ggml_backend_dev_buffer_type(from_buft(buft)->real), tensor);
}
bool capped_buft_is_host(ggml_backend_buffer_type_t buft) {
    return ggml_backend_buft_is_host(ggml_backend_dev_buffer_type(from_buft(buft)->real));
}

void capped_get_memory(ggml_backend_dev_t dev, size_t * free, size_t * total) {
    capped_device * cap = from_dev(dev);
    size_t real_free = 0, real_total = 0;
    ggml_backend_dev_memory(cap->real, &real_free, &real_total);
    const size_t used = cap->used_bytes.load();
    const size_t cap_free = cap->cap_bytes > used ? cap->cap_bytes - used : 0;
    *total = cap->cap_bytes;
    *free = real_free < cap_free ? real_free : cap_free;
}

ggml_backend_buffer_type_t capped_get_buffer_type(ggml_backend_dev_t dev) { return &from_dev(dev)->capped_buft; }

ggml_backend_t capped_init_backend(ggml_backend_dev_t dev, const char * params) {
    ggml_backend_t backend = ggml_backend_dev_init(from_dev(dev)->real, params);
    if (backend != nullptr) {
        // The RPC server asks the backend's device for memory and its default buffer type.
        backend->device = dev;
    }
    return backend;
}

capped_device * make_capped(ggml_backend_dev_t real, size_t cap_bytes) {
    auto * cap = new capped_device();
    cap->real = real;
    cap->cap_bytes = cap_bytes;
    cap->wrapper = *real;
    cap->wrapper.iface.get_memory = capped_get_memory;
    cap->wrapper.iface.get_buffer_type = capped_get_buffer_type;
    cap->wrapper.iface.init_backend = capped_init_backend;
    cap->capped_buft.iface = {
        /* .get_name       = */ capped_buft_name,
        /* .alloc_buffer   = */ capped_alloc_buffer,
        /* .get_alignment  = */ capped_buft_alignment,
        /* .get_max_size   = */ capped_buft_max_size,
        /* .get_alloc_size = */ capped_buft_alloc_size,
        /* .is_host        = */ capped_buft_is_host,
    };
    cap->capped_buft.device = &cap->wrapper;
    cap->capped_buft.context = cap;
    g_capped[&cap->wrapper] = cap;
    return cap;
}

// The devices the stock rpc-server would serve: accelerators if any, else the CPU.
std::vector<ggml_backend_dev_t> default_devices() {
    std::vector<ggml_backend_dev_t> devices;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        enum ggml_backend_dev_type type = ggml_backend_dev_type(dev);
        if (type != GGML_BACKEND_DEVICE_TYPE_CPU && type != GGML_BACKEND_DEVICE_TYPE_ACCEL) {
            devices.push_back(dev);
        }
    }
    if (devices.empty()) {
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (cpu != nullptr) {
            devices.push_back(cpu);
        }
    }
    return devices;
}

struct worker_args {
    std::string host = "127.0.0.1";
    int port = 50052;
    int threads = 1;
    size_t mem_mib = 0;   // 0: the device's own memory, uncapped
    bool cache = false;
    const char * cache_dir = nullptr;
};

bool parse_args(int argc, char ** argv, worker_args & args) {
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--host" && has_value) {
            args.host = argv[++i];
        } else if (arg == "--port" && has_value) {
            args.port = std::atoi(argv[++i]);
        } else if (arg == "--threads" && has_value) {
            args.threads = std::atoi(argv[++i]);
        } else if (arg == "--mem" && has_value) {
            args.mem_mib = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--cache-dir" && has_value) {
            args.cache_dir = argv[++i];
        } else if (arg == "--protocol-version") {
            printf("%d.%d.%d\n", RPC_PROTO_MAJOR_VERSION, RPC_PROTO_MINOR_VERSION, RPC_PROTO_PATCH_VERSION);
            std::exit(0);
        } else {
            fprintf(stderr, "edgeopt-rpc-worker: unknown or incomplete argument %s\n"
                            "usage: edgeopt-rpc-worker [--host H] [--port P] [--threads N] [--mem MiB]"
                            " [--cache-dir DIR] | --protocol-version\n", arg.c_str());
            return false;
        }
    }
    return args.port > 0 && args.port <= 65535 && args.threads > 0;
}

}  // namespace

int main(int argc, char ** argv) {
    worker_args args;
    if (!parse_args(argc, argv, args)) {
        return 2;
    }
    ggml_backend_load_all();
    std::vector<ggml_backend_dev_t> devices = default_devices();
    if (devices.empty()) {
        fprintf(stderr, "edgeopt-rpc-worker: no ggml device found\n");
        return 1;
    }
    if (args.mem_mib > 0) {
        for (auto & dev : devices) {
            dev = &make_capped(dev, args.mem_mib << 20)->wrapper;
        }
    }
    const std::string endpoint = args.host + ":" + std::to_string(args.port);
    fflush(stdout);
    ggml_backend_rpc_start_server(endpoint.c_str(), args.cache_dir, args.threads, devices.size(), devices.data());
    // start_server returns only when it could not bind or accept.
    return 1;
}
