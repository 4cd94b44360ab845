// Transport: the executor's seam to the network — asynchronous point-to-point tensor messages
// matched exactly by (peer rank, tag), a sum all-reduce and an all-to-all over any subset of
// ranks, and a barrier.
// It knows nothing of plans or stages (the executor derives tags from the lowered plan, see
// rank_layout.h); implementations: the endpoints of an InProcessNetwork (ranks as threads, for
// tests) and GlooTransport (gloo_transport.h: c10d ProcessGroupGloo over TCP). One Transport object
// serves one rank and is used by one thread at a time; an InProcessNetwork is thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

// Identifies a message on the link between two ranks; a send matches the receive posted by its
// peer with the same tag (messages with equal tags match in posting order). Non-negative and
// below 2^31 (c10d's limit).
using MessageTag = int64_t;

// How a send finds its receive.
enum class MessageMatching {
  // The receive its peer posted with the same tag (Gloo, MPI).
  kByTag,
  // The n-th send from one rank to another matches the n-th receive the other posted from it,
  // whatever the tags (NCCL's point-to-point has no tags). The executor posts receives in the
  // order their senders send (by message id, which follows each sending group's action order),
  // so both work. The in-process network still compares the tags of each matched pair and fails
  // both ends on a difference, which makes it a check of that ordering.
  kInOrder,
};

// Timeouts and error policy shared by the implementations. A wait that does not finish within
// `timeout` returns an io_error naming this rank, the peer, the tag and what the message was;
// it never hangs. A timed-out operation is withdrawn (a late peer no longer matches it).
struct TransportOptions {
  Seconds timeout = Seconds(30);
  MessageMatching matching = MessageMatching::kByTag;
};

// One posted send or receive.
class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
  // Blocks until the transfer has completed (for a receive: the data is in the buffer; for a
  // send: the buffer may be reused) or the transport's timeout has passed since this call.
  // Calling it again after it returned returns the same Status.
  virtual Status wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Posts a send of `tensor` to `peer` and returns at once; the transfer completes once the peer
  // has posted the matching receive. `what` describes the message for errors ("the activation
  // of stage 1, micro-batch 3").
  // REQUIRES: `tensor` is contiguous and is not modified until the request's wait() returned.
  virtual Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer,
                                                         MessageTag tag, std::string what) = 0;
  // Posts a receive into `buffer` (preallocated, contiguous, of the sender's shape and dtype).
  // A size or dtype mismatch is reported by wait() on both ends.
  virtual Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer,
                                                         MessageTag tag, std::string what) = 0;

  // Replaces each tensor, in place, by its sum over `ranks` (sorted, distinct, containing this
  // rank); every member passes tensors of the same shapes in the same order and every member
  // gets the same bits. Members call one set's all-reduces in the same order, and blocking
  // all-reduces over overlapping rank sets in one agreed order (the executor's blocking ones,
  // after a step's gradient sums, go in increasing order of the sets). A one-member set returns
  // at once. The default posts the sum (all_reduce_sum_async) and waits for it.
  virtual Status all_reduce_sum(const std::vector<at::Tensor>& tensors,
                                const std::vector<int>& ranks);
  // The same sum, posted: returns at once, never waiting for another rank, and the tensors
  // hold the sum once wait() on the request returned ok (they must not be modified before).
  // Members post the all-reduces of one rank set in the same order; all-reduces of different
  // sets may be posted in any order relative to each other once prepare_collectives has set the
  // sets up. (The executor posts gradient sums from inside the backward: a post that blocked
  // could wait on a rank that waits on this one's next message.)
  virtual Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) = 0;
  // An all-to-all over `ranks` (sorted, distinct, containing this rank): `send[j]` goes to the
  // j-th member of `ranks`, and `recv[i]` (preallocated, contiguous) receives what the i-th
  // member sends this one. Every block has one dtype and, after its first dimension, one shape
  // on every member, and member i's send[j] has as many rows as member j's recv[i]. Members
  // call a set's all-to-alls and all-reduces in the same order; blocking, like all_reduce_sum.
  // The default moves the blocks through two all_reduce_sum calls (the blocks' row counts, then
  // a buffer of zeros in which each member writes its own), so every member receives every
  // block: a wrapper that does not override it still exchanges correctly.
  virtual Status all_to_all(const std::vector<at::Tensor>& send,
                            const std::vector<at::Tensor>& recv, const std::vector<int>& ranks);
  // Sets up whatever the transport needs for collectives over each of `sets` (Gloo: one process
  // group per set), in the given order; members call it with their sets in one agreed order
  // (the executor: increasing). A collective over a set not prepared is set up on first use.
  // The default does nothing.
  virtual Status prepare_collectives(const std::vector<std::vector<int>>& sets);
  // Sets up the links to `peers` (every rank this one sends to or receives from), called by
  // every rank with its peers before the first message. The default does nothing; a transport
  // matching in order over groups that are created by both ends together (Gloo) needs it.
  virtual Status prepare_peers(const std::vector<int>& peers);

  // Returns once every rank of the world has entered the barrier.
  virtual Status barrier() = 0;
};

// What every implementation's all_reduce_sum_async returns for a rank set that is not sorted
// distinct ranks containing `rank` (invalid_argument), else ok.
Status check_rank_set(int rank, const std::vector<int>& ranks);
// What every implementation's all_to_all returns for bad arguments (invalid_argument):
// check_rank_set's, or `send` and `recv` not one block per member of `ranks`; else ok.
Status check_all_to_all(int rank, const std::vector<at::Tensor>& send,
                        const std::vector<at::Tensor>& recv, const std::vector<int>& ranks);

// The fabric of an in-process world: ranks are threads sharing one mailbox. A send completes
// only when its receive is posted (no eager buffering, so tests see the same blocking a real
// network would impose); a receive posted early completes when its send arrives. Sums are
// taken in increasing rank order. Thread-safe; must outlive its endpoints.
class InProcessNetwork {
 public:
  InProcessNetwork(int world_size, TransportOptions options = {});
  ~InProcessNetwork();
  InProcessNetwork(const InProcessNetwork&) = delete;
  InProcessNetwork& operator=(const InProcessNetwork&) = delete;

  int world_size() const;
  // The endpoint of `rank`. REQUIRES: 0 <= rank < world_size().
  std::unique_ptr<Transport> endpoint(int rank);
  // Makes every wait that has not completed, now or later, return an io_error ending in
  // `reason` at once, so that when one rank fails the others stop instead of timing out.
  void shut_down(const std::string& reason);

  struct State;  // the shared mailbox (transport.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace motley
