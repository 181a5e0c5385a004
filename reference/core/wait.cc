#include "reference/core/wait.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "reference/core/check.h"
#include "reference/core/scoped.h"

namespace peerlab {

Status waitEvent(cudaEvent_t event, Deadline deadline, std::string_view what) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  for (;;) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return Status::ok();
    if (err != cudaErrorNotReady) return PEERLAB_CUDA(err).withContext(std::string(what));
    if (deadline.expired()) {
      auto waited = duration_cast<milliseconds>(steady_clock::now() - start).count();
      return PEERLAB_TIMEOUT(std::string(what) + ": not complete after " + std::to_string(waited) + " ms");
    }
    // Spin for the first 50 us (small-message latency), then yield, then sleep.
    auto spent = steady_clock::now() - start;
    if (spent < microseconds(50)) continue;
    if (spent < milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(microseconds(100));
    }
  }
}

Status waitStream(cudaStream_t stream, Deadline deadline, std::string_view what) {
  // The event must live on the stream's device, whatever is current.
  int device = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  cudaEvent_t ev = nullptr;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)));
  Status st = PEERLAB_CUDA(cudaEventRecord(ev, stream));
  if (st.isOk()) st = waitEvent(ev, deadline, what);
  if (cudaEventDestroy(ev) != cudaSuccess) (void)cudaGetLastError();
  return st;
}

namespace {

// One background thread at a time, started when there is something to hold. `list_mu_` guards the list and the
// flags; `cuda_mu_` is held around every CUDA call the thread makes.
class Releaser {
 public:
  static Releaser& get() {
    static Releaser* r = new Releaser();  // never destroyed: the thread may outlive static destruction
    return *r;
  }

  void add(std::shared_ptr<void> owner, std::vector<cudaStream_t> streams, int device) {
    std::lock_guard<std::mutex> lock(list_mu_);
    if (!exit_hooked_) {
      // Registered after the CUDA runtime initialized (the caller holds CUDA objects), so it runs before the
      // runtime's own teardown.
      exit_hooked_ = std::atexit([] { Releaser::get().onExit(); }) == 0;
    }
    items_.push_back(Item{std::move(owner), std::move(streams), device});
    if (exiting_) {
      leak();
      return;
    }
    if (!running_) {
      running_ = true;
      std::thread([this] { loop(); }).detach();
    }
    cv_.notify_one();
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(list_mu_);
    return items_.size() + releasing_;
  }

 private:
  struct Item {
    std::shared_ptr<void> owner;
    std::vector<cudaStream_t> streams;
    int device = 0;
  };

  static bool drained(const Item& item) {
    for (cudaStream_t s : item.streams) {
      const cudaError_t err = cudaStreamQuery(s);
      if (err == cudaErrorNotReady) return false;
      if (err != cudaSuccess) (void)cudaGetLastError();  // a failed stream has nothing left to wait for
    }
    return true;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(list_mu_);
    while (!items_.empty() && !exiting_) {
      std::vector<Item> ready;
      {
        std::lock_guard<std::mutex> cuda(cuda_mu_);
        for (auto it = items_.begin(); it != items_.end();) {
          if (drained(*it)) {
            ready.push_back(std::move(*it));
            it = items_.erase(it);
          } else {
            ++it;
          }
        }
      }
      if (!ready.empty()) {
        // Destroyed without the list lock: a free may wait for the device, and add() must not wait with it. They
        // count as held until their references are gone.
        const size_t n_ready = ready.size();
        releasing_ += n_ready;
        lock.unlock();
        {
          std::lock_guard<std::mutex> cuda(cuda_mu_);
          for (Item& item : ready) {
            auto guard = ScopedDevice::make(item.device);
            if (!guard.isOk()) (void)cudaGetLastError();
            item.owner.reset();
          }
        }
        ready.clear();
        lock.lock();
        releasing_ -= n_ready;
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(2));
    }
    running_ = false;
  }

  // The loop checks `exiting_` under the list lock before every scan, so once it is set the only CUDA work left is a
  // release already under way, which taking `cuda_mu_` waits out. (Neither lock is held while taking the other here;
  // the loop takes them list first.)
  void onExit() {
    {
      std::lock_guard<std::mutex> lock(list_mu_);
      exiting_ = true;
      leak();
    }
    std::lock_guard<std::mutex> cuda(cuda_mu_);
  }

  // The process is ending: the driver reclaims what these hold.
  void leak() {
    for (Item& item : items_)
      new std::shared_ptr<void>(std::move(item.owner));
    items_.clear();
  }

  std::mutex list_mu_;
  std::mutex cuda_mu_;
  std::condition_variable cv_;
  std::vector<Item> items_;
  size_t releasing_ = 0;  ///< taken off the list, references not dropped yet
  bool running_ = false;
  bool exiting_ = false;
  bool exit_hooked_ = false;
};

}  // namespace

void releaseWhenIdle(std::shared_ptr<void> owner, std::vector<cudaStream_t> streams, int device) {
  if (!owner) return;
  Releaser::get().add(std::move(owner), std::move(streams), device);
}

size_t heldForRelease() {
  return Releaser::get().held();
}

}  // namespace peerlab
