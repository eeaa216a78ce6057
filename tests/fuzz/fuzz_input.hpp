// The readers under fuzzing take a path: each input is handed to them as an
// in-memory file (memfd), so no disk is touched and nothing is left behind.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace rumus_fuzz {

class InputFile {
 public:
  InputFile() : fd_(memfd_create("rumus-fuzz-input", 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Replaces the file's contents with `data` and returns its path.
  const std::string& hold(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) std::abort();
      done += std::size_t(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace rumus_fuzz
