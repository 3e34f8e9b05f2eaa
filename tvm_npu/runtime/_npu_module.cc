// Runtime module of kind "npu" for tvm-npu.
//
// Python cannot subclass ffi.Module, so this small C++ ModuleObj carries the
// compiled NPU programs (one opaque byte blob owned by the Python side) through
// the Relax VM, export_library and load_module. Every exported symbol forwards
// its (DPS) arguments to the Python global `tvm_npu.runtime.invoke`, which runs
// the simulator. The blob crosses into Python once per module, through
// `tvm_npu.runtime.register_blob`, which returns an integer handle.
//
// Serialized layout (all integers little-endian):
//   magic     8 bytes  "TVMNPUM1"
//   version   u32      kFormatVersion
//   reserved  u32      0
//   length    u64      number of payload bytes that follow the header
//   checksum  u64      FNV-1a 64 of the payload
//   payload:  u64 num_symbols, {u64 len, bytes}*num_symbols, u64 blob_len, blob
// Every read is bounds checked so that a damaged library raises an error
// instead of crashing the process.

#include <tvm/ffi/any.h>
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tvm_npu {
namespace {

using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Array;
using tvm::ffi::Bytes;
using tvm::ffi::Function;
using tvm::ffi::make_object;
using tvm::ffi::Module;
using tvm::ffi::ModuleObj;
using tvm::ffi::Optional;
using tvm::ffi::PackedArgs;
using tvm::ffi::String;
using tvm::ffi::Tensor;

constexpr const char* kKind = "npu";
constexpr const char kMagic[8] = {'T', 'V', 'M', 'N', 'P', 'U', 'M', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 8;
constexpr const char* kRegisterBlobName = "tvm_npu.runtime.register_blob";
constexpr const char* kInvokeName = "tvm_npu.runtime.invoke";
// Introspection entries answered by GetFunction besides the exported symbols.
constexpr const char* kGetBlobName = "__npu_get_blob";
constexpr const char* kGetSymbolsName = "__npu_get_symbols";

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;

// FNV-1a 64 of `data`, continuing from `hash` (so a payload in pieces hashes as one range).
uint64_t Fnv1a64(const char* data, size_t size, uint64_t hash = kFnvOffset) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(data[i]);
    hash *= 1099511628211ULL;
  }
  return hash;
}

void PutU32(std::string* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void PutU64(std::string* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void PutBytes(std::string* out, const char* data, size_t size) {
  PutU64(out, static_cast<uint64_t>(size));
  out->append(data, size);
}

// Bounds-checked little-endian reader over a byte range; throws ValueError.
class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }

  uint64_t U64(const char* what) {
    Need(8, what);
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) {
      value |= static_cast<uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += 8;
    return value;
  }

  uint32_t U32(const char* what) {
    Need(4, what);
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      value |= static_cast<uint32_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += 4;
    return value;
  }

  std::string Str(const char* what) {
    uint64_t size = U64(what);
    Need(size, what);
    std::string value(data_ + pos_, static_cast<size_t>(size));
    pos_ += static_cast<size_t>(size);
    return value;
  }

  const char* Raw(size_t size, const char* what) {
    Need(size, what);
    const char* ptr = data_ + pos_;
    pos_ += size;
    return ptr;
  }

 private:
  void Need(uint64_t size, const char* what) const {
    if (size > remaining()) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: truncated while reading " << what
                                << " (need " << size << " bytes, " << remaining() << " left)";
    }
  }

  const char* data_;
  size_t size_;
  size_t pos_{0};
};

Function RequirePythonGlobal(const char* name) {
  std::optional<Function> func = Function::GetGlobal(name);
  if (!func.has_value()) {
    TVM_FFI_THROW(RuntimeError) << "Global function `" << name
                                << "` is not registered: `import tvm_npu` (tvm_npu.runtime_module) in this process "
                                << "before creating, loading or running NPU modules";
  }
  return *func;
}

class NpuModuleObj final : public ModuleObj {
 public:
  // One consecutive piece of the program: (first byte, length).
  using Part = std::pair<const char*, size_t>;

  // The program bytes live in `bytes` or, when `view` is set, in the Python buffer it views
  // (kept alive by its DLPack deleter); `parts_` points into the one that holds them.
  NpuModuleObj(Bytes bytes, Optional<Tensor> view, Array<String> symbols)
      : bytes_(std::move(bytes)), view_(std::move(view)), symbols_(std::move(symbols)) {
    if (view_.has_value()) {
      const DLTensor* t = view_.value().GetDLTensorPtr();
      parts_.emplace_back(static_cast<const char*>(t->data) + t->byte_offset, static_cast<size_t>(t->shape[0]));
    } else {
      parts_.emplace_back(bytes_.data(), bytes_.size());
    }
    Init();
  }

  // The program as consecutive pieces in the memory of Python objects (`owners`, kept alive here):
  // a model's weights stay in the arrays of its constants, not copied into one blob (issue 26).
  NpuModuleObj(Array<Any> owners, std::vector<Part> parts, Array<String> symbols)
      : owners_(std::move(owners)), parts_(std::move(parts)), symbols_(std::move(symbols)) {
    Init();
  }

  void Init() {  // the total size; the symbols checked
    for (const auto& part : parts_) size_ += part.second;
    for (const String& symbol : symbols_) {
      if (symbol.size() == 0) {
        TVM_FFI_THROW(ValueError) << "tvm_npu module: empty symbol name";
      }
      if (!symbol_set_.insert(std::string(symbol)).second) {
        TVM_FFI_THROW(ValueError) << "tvm_npu module: duplicate symbol `" << symbol << "`";
      }
    }
  }

  // Hand the blob to Python once, at the first call: calls then only carry the integer
  // handle, and a module that is only built and exported never holds a second copy of
  // its program (a model's weights) on the Python side.
  int64_t Handle() {
    std::call_once(registered_, [this] {
      handle_ = RequirePythonGlobal(kRegisterBlobName)(Blob()).cast<int64_t>();
    });
    return handle_;
  }

  const char* kind() const final { return kKind; }

  int GetPropertyMask() const final { return Module::kBinarySerializable | Module::kRunnable; }

  Optional<Function> GetFunction(const String& name) final {
    if (name == kGetBlobName) {
      Module self = tvm::ffi::GetRef<Module>(this);
      NpuModuleObj* obj = this;
      return Function::FromPacked([self, obj](PackedArgs, Any* rv) {
        (void)self;
        *rv = obj->Blob();
      });
    }
    if (name == kGetSymbolsName) {
      return Function::FromPacked([symbols = symbols_](PackedArgs, Any* rv) { *rv = symbols; });
    }
    if (symbol_set_.count(std::string(name)) == 0) return std::nullopt;
    Module self = tvm::ffi::GetRef<Module>(this);
    NpuModuleObj* obj = this;
    String symbol = name;
    // The closure holds `self` so the module (and its handle) outlives the VM's
    // cached function.
    return Function::FromPacked([self, obj, symbol](PackedArgs args, Any* rv) {
      (void)self;
      int64_t handle = obj->Handle();
      Function invoke = RequirePythonGlobal(kInvokeName);
      std::vector<AnyView> forwarded(static_cast<size_t>(args.size()) + 2);
      forwarded[0] = handle;
      forwarded[1] = symbol;
      for (int32_t i = 0; i < args.size(); ++i) forwarded[i + 2] = args[i];
      invoke.CallPacked(forwarded.data(), static_cast<int32_t>(forwarded.size()), rv);
    });
  }

  bool ImplementsFunction(const String& name) final {
    return name == kGetBlobName || name == kGetSymbolsName ||
           symbol_set_.count(std::string(name)) != 0;
  }

  Bytes SaveToBytes() const final {
    std::string out;
    out.reserve(static_cast<size_t>(SerializedSize()));  // one exact allocation: no growth copies
    Serialize([&out](const char* data, size_t size) { out.append(data, size); });
    return Bytes(std::move(out));
  }

  // Bytes SaveToBytes gives, counted without making them.
  uint64_t SerializedSize() const {
    uint64_t size = kHeaderSize + 8 + 8 + size_;
    for (const String& symbol : symbols_) size += 8 + symbol.size();
    return size;
  }

  // Append the serialized form to the file `path` straight from the program's memory: exporting a
  // model does not hold a second copy of its weights (tvm_npu/tools/pack_stream.py).
  void AppendTo(const std::string& path) const {
    std::FILE* file = std::fopen(path.c_str(), "ab");
    if (file == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "tvm_npu module: cannot open " << path << ": " << std::strerror(errno);
    }
    bool ok = true;
    Serialize([&](const char* data, size_t size) { ok = ok && std::fwrite(data, 1, size, file) == size; });
    ok = std::fclose(file) == 0 && ok;
    if (!ok) TVM_FFI_THROW(RuntimeError) << "tvm_npu module: writing " << path << " failed";
  }

  String InspectSource(const String& /*format*/) const final {
    std::string text = "// tvm_npu module: " + std::to_string(size_) + " blob bytes in " +
                       std::to_string(parts_.size()) + " parts\n";
    for (const String& symbol : symbols_) text += "// symbol " + std::string(symbol) + "\n";
    return String(text);
  }

  // The serialized layout (file comment) handed to `sink(data, size)` piece by piece: the header's
  // length and checksum are computed over the pieces, so the payload is never assembled.
  template <typename Sink>
  void Serialize(Sink&& sink) const {
    std::string table;  // the symbol count, the symbols and the blob's length: small
    PutU64(&table, static_cast<uint64_t>(symbols_.size()));
    for (const String& symbol : symbols_) PutBytes(&table, symbol.data(), symbol.size());
    PutU64(&table, static_cast<uint64_t>(size_));
    std::string header(kMagic, sizeof(kMagic));
    PutU32(&header, kFormatVersion);
    PutU32(&header, 0);
    PutU64(&header, static_cast<uint64_t>(table.size() + size_));
    uint64_t hash = Fnv1a64(table.data(), table.size());
    for (const auto& part : parts_) hash = Fnv1a64(part.first, part.second, hash);
    PutU64(&header, hash);
    sink(header.data(), header.size());
    sink(table.data(), table.size());
    for (const auto& part : parts_) sink(part.first, part.second);
  }

  static Module LoadFromBytes(const Bytes& bytes) {
    Reader header(bytes.data(), bytes.size());
    const char* magic = header.Raw(sizeof(kMagic), "magic");
    if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: bad magic";
    }
    uint32_t version = header.U32("version");
    if (version != kFormatVersion) {
      TVM_FFI_THROW(ValueError) << "tvm_npu module format version " << version
                                << " is not supported (expected " << kFormatVersion << ")";
    }
    if (header.U32("reserved") != 0) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: reserved header field is not zero";
    }
    uint64_t length = header.U64("payload length");
    uint64_t checksum = header.U64("checksum");
    if (length != header.remaining()) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: payload length " << length
                                << " does not match the " << header.remaining()
                                << " bytes present";
    }
    const char* payload = header.Raw(static_cast<size_t>(length), "payload");
    if (Fnv1a64(payload, static_cast<size_t>(length)) != checksum) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: checksum mismatch";
    }

    Reader reader(payload, static_cast<size_t>(length));
    uint64_t num_symbols = reader.U64("symbol count");
    if (num_symbols > reader.remaining() / 8) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: implausible symbol count "
                                << num_symbols;
    }
    Array<String> symbols;
    for (uint64_t i = 0; i < num_symbols; ++i) symbols.push_back(String(reader.Str("symbol")));
    std::string blob = reader.Str("program blob");
    if (reader.remaining() != 0) {
      TVM_FFI_THROW(ValueError) << "Corrupted tvm_npu module: " << reader.remaining()
                                << " trailing bytes";
    }
    return Create(Bytes(std::move(blob)), std::move(symbols));
  }

  static Module Create(Bytes blob, Array<String> symbols) {
    return Module(make_object<NpuModuleObj>(std::move(blob), Optional<Tensor>(), std::move(symbols)));
  }

  static Module View(Tensor buffer, Array<String> symbols) {
    return Module(make_object<NpuModuleObj>(Bytes(), Optional<Tensor>(std::move(buffer)), std::move(symbols)));
  }

  // The first `n` bytes of the program (fewer if it is shorter): what a caller needs to tell its kind
  // without a copy of the whole program.
  Bytes Head(size_t n) const {
    std::string out;
    for (const auto& part : parts_) {
      if (out.size() >= n) break;
      out.append(part.first, std::min(part.second, n - out.size()));
    }
    return Bytes(std::move(out));
  }

  static Module FromParts(Array<Any> owners, std::vector<Part> parts, Array<String> symbols) {
    return Module(make_object<NpuModuleObj>(std::move(owners), std::move(parts), std::move(symbols)));
  }

 private:
  Bytes Blob() const {  // one copy, for Python
    std::string out;
    out.reserve(size_);
    for (const auto& part : parts_) out.append(part.first, part.second);
    return Bytes(std::move(out));
  }

  Bytes bytes_;
  Optional<Tensor> view_;
  Array<Any> owners_;
  std::vector<Part> parts_;
  size_t size_ = 0;
  std::once_flag registered_;
  int64_t handle_ = -1;
  Array<String> symbols_;
  std::unordered_set<std::string> symbol_set_;
};

}  // namespace

// Entry points exported from the shared library. They are deliberately not
// registered as globals by a static initializer: GlobalDef throws on duplicate
// names, and a throw during dlopen (e.g. when a rebuilt copy of this library is
// loaded into the same process) would abort the process. The Python side wraps
// them in the globals `tvm_npu.runtime.create_module` and
// `ffi.Module.load_from_bytes.npu`, registered with override=True.
Module CreateModule(Bytes blob, Array<String> symbols) {
  return NpuModuleObj::Create(std::move(blob), std::move(symbols));
}

// The same over a 1-D uint8 CPU buffer (a numpy view of a Python bytearray, by DLPack): the
// module keeps the buffer alive and reads the program in place, so a model's weights are
// not copied when its module is created.
Module CreateModuleFromBuffer(Tensor data, Array<String> symbols) {
  const DLTensor* t = data.GetDLTensorPtr();
  if (t->ndim != 1 || t->dtype.code != kDLUInt || t->dtype.bits != 8 || t->dtype.lanes != 1 ||
      t->device.device_type != kDLCPU || !data.IsContiguous()) {
    TVM_FFI_THROW(TypeError) << "tvm_npu module: the program buffer must be a contiguous 1-D uint8 CPU array";
  }
  return NpuModuleObj::View(std::move(data), std::move(symbols));
}

// The program as consecutive pieces of memory, `lengths[i]` bytes at address `addresses[i]`, which
// the Python objects `owners` hold (numpy arrays of the model's constants, a bytearray of the code):
// the module keeps them alive and never copies the pieces until Python asks for the whole program.
Module CreateModuleFromParts(Array<Any> owners, Array<int64_t> addresses, Array<int64_t> lengths,
                             Array<String> symbols) {
  if (addresses.size() != lengths.size()) {
    TVM_FFI_THROW(ValueError) << "tvm_npu module: " << addresses.size() << " part addresses for "
                              << lengths.size() << " lengths";
  }
  std::vector<NpuModuleObj::Part> parts;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (lengths[i] < 0 || (lengths[i] > 0 && addresses[i] == 0)) {
      TVM_FFI_THROW(ValueError) << "tvm_npu module: part " << i << " is not a valid memory range";
    }
    parts.emplace_back(reinterpret_cast<const char*>(static_cast<uintptr_t>(addresses[i])),
                       static_cast<size_t>(lengths[i]));
  }
  return NpuModuleObj::FromParts(std::move(owners), std::move(parts), std::move(symbols));
}

Module LoadModuleFromBytes(Bytes bytes) { return NpuModuleObj::LoadFromBytes(bytes); }

const NpuModuleObj* AsNpu(const Module& mod) {
  if (std::strcmp(mod->kind(), kKind) != 0) {
    TVM_FFI_THROW(TypeError) << "expected a module of kind `" << kKind << "`, got `" << mod->kind()
                             << "`";
  }
  return static_cast<const NpuModuleObj*>(mod.operator->());
}

// The serialized form, as export_library embeds it; Python has no other way to get it.
Bytes SaveModuleToBytes(Module mod) { return AsNpu(mod)->SaveToBytes(); }

Bytes ProgramHead(Module mod, int64_t n) { return AsNpu(mod)->Head(static_cast<size_t>(std::max<int64_t>(n, 0))); }

int64_t SerializedSize(Module mod) { return static_cast<int64_t>(AsNpu(mod)->SerializedSize()); }

void AppendSerialized(Module mod, String path) { AsNpu(mod)->AppendTo(std::string(path)); }

// Any binary-serializable module's SaveToBytes (the small host executable beside the NPU programs),
// which TVM does not expose to Python on its own.
Bytes AnySaveToBytes(Module mod) {
  if (!(mod->GetPropertyMask() & Module::kBinarySerializable)) {
    TVM_FFI_THROW(TypeError) << "module of kind `" << mod->kind() << "` is not binary serializable";
  }
  return mod->SaveToBytes();
}

}  // namespace tvm_npu

TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_create_module, tvm_npu::CreateModule);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_create_module_from_buffer, tvm_npu::CreateModuleFromBuffer);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_create_module_from_parts, tvm_npu::CreateModuleFromParts);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_load_from_bytes, tvm_npu::LoadModuleFromBytes);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_save_to_bytes, tvm_npu::SaveModuleToBytes);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_program_head, tvm_npu::ProgramHead);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_serialized_size, tvm_npu::SerializedSize);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_append_serialized, tvm_npu::AppendSerialized);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tvm_npu_any_save_to_bytes, tvm_npu::AnySaveToBytes);
