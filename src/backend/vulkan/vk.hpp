#pragma once
// vulkan-hpp with a dynamic dispatcher: extension entry points (push
// descriptors) are loaded at run time, through the instance so that the
// same table serves every device of the process.
#define VULKAN_HPP_DISPATCH_LOADER_DYNAMIC 1
#include <vulkan/vulkan.hpp>
