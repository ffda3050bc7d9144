// N-API face of the Fabric (src/common/addon.ts is its only caller).
//
// The boundary is thin on purpose: JS owns the API; this file converts arguments, turns
// failed control calls into errors carrying a fixed `status` code, and hands completion
// batches over. Events reach JS through one thread-safe-function call per batch, never one
// per operation. Every method catches C++ exceptions so none crosses into JS unhandled.
#include <napi.h>

#include <cstdlib>  // first, so __GLIBC__ is defined where the C library is glibc
#include <cerrno>
#include <sys/file.h>
#include <sys/uio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "fabric.h"
#include "xxh32.h"

namespace {

using nova::Fabric;
using nova::FabricOptions;
using nova::Status;

Napi::Error StatusError(Napi::Env env, Status status, const std::string& what) {
  Napi::Error err = Napi::Error::New(env, what + " failed (status " + std::to_string(status) + ")");
  err.Value().Set("status", Napi::Number::New(env, status));
  return err;
}

template <typename F>
Napi::Value Guard(Napi::Env env, F&& body) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string("native transport: ") + e.what());
  }
}

std::string BytesArg(const Napi::Value& v, const char* name) {
  if (!v.IsBuffer()) throw Napi::TypeError::New(v.Env(), std::string(name) + " must be a Buffer");
  auto b = v.As<Napi::Buffer<uint8_t>>();
  return std::string(reinterpret_cast<const char*>(b.Data()), b.Length());
}

uint32_t U32Arg(const Napi::Value& v, const char* name) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= 4294967295.0 && d == std::trunc(d))) {
    throw Napi::RangeError::New(v.Env(), std::string(name) + " must be a 32-bit unsigned integer");
  }
  return static_cast<uint32_t>(d);
}

// A whole number in [0, max] (an fd, a length, an offset), as JS passes them.
double WholeArg(const Napi::Value& v, const char* name, double max) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= max && d == std::trunc(d))) {
    throw Napi::RangeError::New(v.Env(), std::string(name) + " must be a whole number in [0, " +
                                             std::to_string(static_cast<uint64_t>(max)) + "]");
  }
  return d;
}

class FabricWrap : public Napi::ObjectWrap<FabricWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeFabric",
                       {
                           InstanceMethod<&FabricWrap::Address>("address"),
                           InstanceMethod<&FabricWrap::MapRegion>("mapRegion"),
                           InstanceMethod<&FabricWrap::Connect>("connect"),
                           InstanceMethod<&FabricWrap::ImportRkey>("importRkey"),
                           InstanceMethod<&FabricWrap::DropRkey>("dropRkey"),
                           InstanceMethod<&FabricWrap::CloseRegion>("closeRegion"),
                           InstanceMethod<&FabricWrap::CloseEndpoint>("closeEndpoint"),
                           InstanceMethod<&FabricWrap::RegisterFile>("registerFile"),
                           InstanceMethod<&FabricWrap::UnregisterFile>("unregisterFile"),
                           InstanceMethod<&FabricWrap::FileEnd>("fileEnd"),
                           InstanceMethod<&FabricWrap::Submit>("submit"),
                           InstanceMethod<&FabricWrap::Drain>("drain"),
                           InstanceMethod<&FabricWrap::Close>("close"),
                           InstanceMethod<&FabricWrap::Stats>("stats"),
                           InstanceMethod<&FabricWrap::Ref>("ref"),
                           InstanceMethod<&FabricWrap::Unref>("unref"),
                       });
  }

  // new NativeFabric({spinUs, controlTimeoutMs}, onEvents)
  explicit FabricWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FabricWrap>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction()) {
      throw Napi::TypeError::New(env, "NativeFabric(options, onEvents)");
    }
    FabricOptions options;
    Napi::Object o = info[0].As<Napi::Object>();
    if (o.Has("spinUs")) options.spin_us = U32Arg(o.Get("spinUs"), "spinUs");
    if (o.Has("controlTimeoutMs")) {
      options.control_timeout_ms = U32Arg(o.Get("controlTimeoutMs"), "controlTimeoutMs");
    }
    tsfn_ = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "nova-fabric", 0, 1);
    std::string error;
    Napi::ThreadSafeFunction* tsfn = &tsfn_;
    fabric_ = Fabric::Create(options, [tsfn]() { tsfn->NonBlockingCall(); }, &error);
    if (!fabric_) {
      tsfn_.Release();
      throw Napi::Error::New(env, "cannot start the UCX fabric: " + error +
                                      " (is libucx installed? run scripts/setup.sh)");
    }
    napi_add_env_cleanup_hook(env, &FabricWrap::AtExit, this);
    hooked_ = true;
  }

  ~FabricWrap() override { Shutdown(); }

 private:
  static void AtExit(void* self) {
    auto w = static_cast<FabricWrap*>(self);
    w->hooked_ = false;  // Node is removing the hook itself
    w->Shutdown();
  }

  void Shutdown() {
    if (hooked_) {
      napi_remove_env_cleanup_hook(Env(), &FabricWrap::AtExit, this);
      hooked_ = false;
    }
    if (fabric_ && !fabric_->closed()) {
      fabric_->Close();  // joins the progress thread: no Notify after this
      tsfn_.Release();
    }
  }

  Fabric& fabric(Napi::Env env) {
    if (!fabric_ || fabric_->closed()) throw StatusError(env, nova::kClosed, "fabric is closed:");
    return *fabric_;
  }

  Napi::Value Address(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      const std::string& a = fabric(env).address();
      return Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(a.data()), a.size());
    });
  }

  // mapRegion(length) -> {id, memory: ArrayBuffer, address: bigint, rkey: Buffer}
  Napi::Value MapRegion(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "length must be a number");
      double len = info[0].As<Napi::Number>().DoubleValue();
      if (!(len >= 1) || len > 1099511627776.0) {
        throw Napi::RangeError::New(env, "region length must be between 1 byte and 1 TiB");
      }
      nova::RegionInfo r;
      Status s = fabric(env).MapRegion(static_cast<size_t>(len), &r);
      if (s != nova::kOk) throw StatusError(env, s, "mapRegion");
      Napi::Object out = Napi::Object::New(env);
      out.Set("id", Napi::Number::New(env, r.id));
      // No finalizer: the region's life is explicit (close), and JS detaches this buffer
      // before the memory is unmapped.
      out.Set("memory", Napi::ArrayBuffer::New(env, r.address, r.length));
      out.Set("address",
              Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(r.address))));
      out.Set("rkey", Napi::Buffer<uint8_t>::Copy(
                          env, reinterpret_cast<const uint8_t*>(r.packed_rkey.data()),
                          r.packed_rkey.size()));
      return out;
    });
  }

  // connect(workerAddress, opId) -> endpoint id; readiness arrives as kEvConnected(opId).
  Napi::Value Connect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      std::string addr = BytesArg(info[0], "address");
      uint32_t ep = 0;
      Status s = fabric(env).Connect(addr, U32Arg(info[1], "opId"), &ep);
      if (s != nova::kOk) throw StatusError(env, s, "connect");
      return Napi::Number::New(env, ep);
    });
  }

  // importRkey(ep, packedRkey, remoteAddress: bigint, remoteLength) -> remote key id
  Napi::Value ImportRkey(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      uint32_t ep = U32Arg(info[0], "ep");
      std::string packed = BytesArg(info[1], "rkey");
      if (!info[2].IsBigInt()) throw Napi::TypeError::New(env, "address must be a bigint");
      bool lossless = true;
      uint64_t address = info[2].As<Napi::BigInt>().Uint64Value(&lossless);
      if (!info[3].IsNumber()) throw Napi::TypeError::New(env, "length must be a number");
      uint64_t length = static_cast<uint64_t>(info[3].As<Napi::Number>().DoubleValue());
      uint32_t id = 0;
      Status s = fabric(env).ImportRkey(ep, packed, address, length, &id);
      if (s != nova::kOk) throw StatusError(env, s, "importRemoteKey");
      return Napi::Number::New(env, id);
    });
  }

  Napi::Value DropRkey(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      Status s = fabric(env).DropRkey(U32Arg(info[0], "id"));
      if (s != nova::kOk) throw StatusError(env, s, "dropRemoteKey");
      return env.Undefined();
    });
  }

  Napi::Value CloseRegion(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      Status s = fabric(env).CloseRegion(U32Arg(info[0], "id"), U32Arg(info[1], "opId"));
      if (s != nova::kOk) throw StatusError(env, s, "closeRegion");
      return env.Undefined();
    });
  }

  // registerFile(handle, fd, limit, ep, windowRegion, windowStart, windowLength)
  Napi::Value RegisterFile(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      constexpr double kMax = 9007199254740992.0;  // 2^53: exact in a double
      int fd = static_cast<int>(WholeArg(info[1], "fd", INT32_MAX));
      auto limit = static_cast<uint64_t>(WholeArg(info[2], "limit", kMax));
      nova::Fabric::FileWindow window{U32Arg(info[4], "windowRegion"),
                                      static_cast<uint64_t>(WholeArg(info[5], "windowStart", kMax)),
                                      static_cast<uint64_t>(WholeArg(info[6], "windowLength", kMax))};
      Status s = fabric(env).RegisterFile(U32Arg(info[0], "handle"), fd, limit, U32Arg(info[3], "ep"),
                                          window);
      if (s != nova::kOk) throw StatusError(env, s, "registerFile");
      return env.Undefined();
    });
  }

  // unregisterFile(handle) -> end of its furthest write
  Napi::Value UnregisterFile(const Napi::CallbackInfo& info) {
    return FileEndCall(info, &nova::Fabric::UnregisterFile, "unregisterFile");
  }

  // fileEnd(handle) -> end of its furthest write so far
  Napi::Value FileEnd(const Napi::CallbackInfo& info) {
    return FileEndCall(info, &nova::Fabric::FileEnd, "fileEnd");
  }

  Napi::Value FileEndCall(const Napi::CallbackInfo& info,
                          Status (nova::Fabric::*call)(uint32_t, uint64_t*), const char* what) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      uint64_t end = 0;
      Status s = (fabric(env).*call)(U32Arg(info[0], "handle"), &end);
      if (s != nova::kOk) throw StatusError(env, s, what);
      return Napi::Number::New(env, static_cast<double>(end));
    });
  }

  Napi::Value CloseEndpoint(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      Status s = fabric(env).CloseEndpoint(U32Arg(info[0], "id"));
      if (s != nova::kOk && s != nova::kBadArgument) throw StatusError(env, s, "closeEndpoint");
      return env.Undefined();
    });
  }

  // submit(descriptors, count, messages, messagesLength, waitUs?) -> events ready to drain
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      if (!info[0].IsBuffer() || !info[2].IsBuffer()) {
        throw Napi::TypeError::New(env, "submit(descriptors, count, messages, length)");
      }
      auto desc = info[0].As<Napi::Buffer<uint8_t>>();
      auto msgs = info[2].As<Napi::Buffer<uint8_t>>();
      uint32_t count = U32Arg(info[1], "count");
      uint32_t msg_len = U32Arg(info[3], "length");
      if (static_cast<size_t>(count) * sizeof(nova::OpDesc) > desc.Length() ||
          msg_len > msgs.Length()) {
        throw Napi::RangeError::New(env, "submit: counts exceed the buffers");
      }
      // Descriptors may be unaligned inside a pooled Buffer: copy them out.
      std::unique_ptr<nova::OpDesc[]> ops(new nova::OpDesc[count > 0 ? count : 1]);
      memcpy(ops.get(), desc.Data(), count * sizeof(nova::OpDesc));
      if (!fabric_) throw StatusError(env, nova::kClosed, "submit");
      fabric_->Submit(ops.get(), count, msgs.Data(), msg_len);  // after close: kClosed events
      uint32_t wait_us = info.Length() > 4 && info[4].IsNumber() ? U32Arg(info[4], "waitUs") : 0;
      return Napi::Boolean::New(env, wait_us > 0 && fabric_->AwaitEvents(wait_us));
    });
  }

  // drain(out: Buffer, arena: Buffer, large: Array) -> 2 * events written + (more ? 1 : 0)
  Napi::Value Drain(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      if (!info[0].IsBuffer() || !info[1].IsBuffer() || !info[2].IsArray()) {
        throw Napi::TypeError::New(env, "drain(out, arena, large)");
      }
      if (!fabric_) return Napi::Number::New(env, 0);
      auto out = info[0].As<Napi::Buffer<uint8_t>>();
      auto arena = info[1].As<Napi::Buffer<uint8_t>>();
      Napi::Array large = info[2].As<Napi::Array>();
      size_t max = out.Length() / sizeof(nova::Event);
      static thread_local std::vector<nova::Event> events;
      if (events.size() < max) events.resize(max);
      std::vector<nova::Payload> taken;
      bool more = false;
      size_t n = fabric_->DrainEvents(events.data(), max, arena.Data(), arena.Length(), &taken, &more);
      memcpy(out.Data(), events.data(), n * sizeof(nova::Event));
      uint32_t base = large.Length();
      for (size_t i = 0; i < taken.size(); ++i) {
        large.Set(base + i, Napi::Buffer<uint8_t>::New(
                                env, taken[i].data, taken[i].length,
                                [](Napi::Env, uint8_t* data) { free(data); }));
      }
      return Napi::Number::New(env, static_cast<double>(n * 2 + (more ? 1 : 0)));
    });
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    return info.Env().Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    if (!fabric_) return o;
    nova::FabricStats s = fabric_->stats();
    o.Set("opsPosted", Napi::Number::New(env, static_cast<double>(s.ops_posted)));
    o.Set("batches", Napi::Number::New(env, static_cast<double>(s.batches)));
    o.Set("events", Napi::Number::New(env, static_cast<double>(s.events)));
    o.Set("notifications", Napi::Number::New(env, static_cast<double>(s.notifications)));
    o.Set("wakeups", Napi::Number::New(env, static_cast<double>(s.wakeups)));
    o.Set("malformedFrames", Napi::Number::New(env, static_cast<double>(s.malformed_frames)));
    o.Set("unknownEndpointFrames",
          Napi::Number::New(env, static_cast<double>(s.unknown_endpoint_frames)));
    o.Set("fileWrites", Napi::Number::New(env, static_cast<double>(s.file_writes)));
    return o;
  }

  Napi::Value Ref(const Napi::CallbackInfo& info) {
    if (fabric_ && !fabric_->closed()) tsfn_.Ref(info.Env());
    return info.Env().Undefined();
  }

  Napi::Value Unref(const Napi::CallbackInfo& info) {
    if (fabric_ && !fabric_->closed()) tsfn_.Unref(info.Env());
    return info.Env().Undefined();
  }

  std::unique_ptr<Fabric> fabric_;
  Napi::ThreadSafeFunction tsfn_;
  bool hooked_ = false;
};

// detach(arrayBuffer): makes a region's memory unreachable from JS before it is unmapped.
Napi::Value Detach(const Napi::CallbackInfo& info) {
  if (!info[0].IsArrayBuffer()) throw Napi::TypeError::New(info.Env(), "detach(ArrayBuffer)");
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  if (!ab.IsDetached()) ab.Detach();
  return info.Env().Undefined();
}

Napi::Value Version(const Napi::CallbackInfo& info) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return Napi::String::New(info.Env(), std::to_string(major) + "." + std::to_string(minor) + "." +
                                           std::to_string(release));
}

// checksum32(bytes: Uint8Array): XXH32 with seed 0, as an unsigned 32-bit number.
Napi::Value Checksum32(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsTypedArray()) throw Napi::TypeError::New(info.Env(), "checksum32(Uint8Array)");
  Napi::TypedArray t = info[0].As<Napi::TypedArray>();
  if (t.TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(info.Env(), "checksum32(Uint8Array)");
  Napi::Uint8Array bytes = t.As<Napi::Uint8Array>();
  return Napi::Number::New(info.Env(), nova::Xxh32(bytes.Data(), bytes.ByteLength()));
}

// heapFreeBytes(): bytes the C heap holds free for reuse (glibc's mallinfo2, every arena; mallinfo,
// whose int fields may wrap past 2 GiB, before glibc 2.33): memory a process freed that stays
// resident until malloc hands it out again; 0 where there is no such call.
Napi::Value HeapFreeBytes(const Napi::CallbackInfo& info) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  return Napi::Number::New(info.Env(), static_cast<double>(mallinfo2().fordblks));
#elif defined(__GLIBC__)
  return Napi::Number::New(info.Env(), static_cast<double>(static_cast<unsigned>(mallinfo().fordblks)));
#else
  return Napi::Number::New(info.Env(), 0);
#endif
}

// trimHeap(): hands the C heap's whole free pages back to the kernel (glibc's malloc_trim).
Napi::Value TrimHeap(const Napi::CallbackInfo& info) {
#ifdef __GLIBC__
  return Napi::Boolean::New(info.Env(), malloc_trim(0) != 0);
#else
  return Napi::Boolean::New(info.Env(), false);
#endif
}

// preadCached(fd, buffer, position): reads into `buffer` what the page cache holds of its length at
// `position`, without waiting for the disk (preadv2 with RWF_NOWAIT): the bytes read, from 0 (the
// end of the file) up to its length, or -1 when the read would wait, the call is not there, or it
// failed. The caller reads the rest the usual way; a read served here skips a thread pool's round trip.
Napi::Value PreadCached(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsBuffer() || !info[2].IsNumber()) {
    throw Napi::TypeError::New(env, "preadCached(fd, Buffer, position)");
  }
  Napi::Buffer<uint8_t> buffer = info[1].As<Napi::Buffer<uint8_t>>();
  const double position = info[2].As<Napi::Number>().DoubleValue();
  if (!(position >= 0) || buffer.Length() == 0) return Napi::Number::New(env, -1);
#if defined(__linux__) && defined(RWF_NOWAIT)
  struct iovec iov{buffer.Data(), buffer.Length()};
  const ssize_t n = preadv2(info[0].As<Napi::Number>().Int32Value(), &iov, 1, static_cast<off_t>(position), RWF_NOWAIT);
  return Napi::Number::New(env, n < 0 ? -1 : static_cast<double>(n));
#else
  return Napi::Number::New(env, -1);
#endif
}

// lockFile(fd): flock(LOCK_EX | LOCK_NB) on fd's open file; 0, or the errno (EWOULDBLOCK: another
// open file holds it). The kernel drops the lock with the last descriptor, so a killed holder
// leaves none behind, whatever pid the next process gets.
Napi::Value LockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "lockFile(fd)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  int r;
  do {
    r = flock(fd, LOCK_EX | LOCK_NB);
  } while (r != 0 && errno == EINTR);
  return Napi::Number::New(env, r == 0 ? 0 : errno);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeFabric", FabricWrap::Define(env));
  exports.Set("detach", Napi::Function::New(env, Detach));
  exports.Set("ucxVersion", Napi::Function::New(env, Version));
  exports.Set("checksum32", Napi::Function::New(env, Checksum32));
  exports.Set("trimHeap", Napi::Function::New(env, TrimHeap));
  exports.Set("preadCached", Napi::Function::New(env, PreadCached));
  exports.Set("heapFreeBytes", Napi::Function::New(env, HeapFreeBytes));
  exports.Set("lockFile", Napi::Function::New(env, LockFile));
  return exports;
}

}  // namespace

NODE_API_MODULE(nova_transport, Init)
