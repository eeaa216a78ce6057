// Built when rumus is configured without Vulkan: no GPU is ever "best".
namespace rumus {
int best_vulkan_device_index() { return -1; }
}  // namespace rumus
