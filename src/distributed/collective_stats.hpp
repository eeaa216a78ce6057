#pragma once
// Counters behind collective_stats() that the transports feed.
namespace rumus::distributed::detail {

// One separate exchange of the requests before a collective's data.
void count_request_exchange();

}  // namespace rumus::distributed::detail
