#pragma once
// Every user-facing failure derives from rumus::Error; messages name the op,
// what was expected and what was given.
#include <stdexcept>
#include <string>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { public: using Error::Error; };
class DTypeError : public Error { public: using Error::Error; };
class DeviceError : public Error { public: using Error::Error; };
class AutogradError : public Error { public: using Error::Error; };
class IoError : public Error { public: using Error::Error; };
// A value the op cannot take, e.g. an integer division by zero.
class ValueError : public Error { public: using Error::Error; };
// An allocation the device cannot satisfy; ops name themselves, the shape and the dtype.
class OutOfMemoryError : public Error { public: using Error::Error; };
// Work a captured step cannot record or replay faithfully (core/capture.hpp).
class CaptureError : public Error { public: using Error::Error; };

}  // namespace rumus

RUMUS_API_END
