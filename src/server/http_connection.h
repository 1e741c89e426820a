// One client's TCP connection, served on Boost.Asio without a thread of its own. It reads
// requests under limits and deadlines that hold whatever the client does — header and body bytes
// bounded while they are read, whatever the transfer encoding; a deadline for a request's
// headers (from its first byte) and another for its body, so a client trickling bytes is cut
// off — answers them in order (keep-alive and pipelining per RFC 9112), sends chunked bodies as
// they are made with a deadline per write, and notices a client that goes away while its
// request is being answered. What a request means is the RequestHandler's business.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace voxd::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;
using RequestHead = http::request_header<>;

struct ConnectionLimits {
  size_t max_header_bytes = 32 << 10;  // the request line and every header line together
  size_t max_body_bytes = 2 << 20;     // after transfer decoding
  std::chrono::milliseconds header_timeout{10000};  // a request's first byte → its last header
  std::chrono::milliseconds body_timeout{10000};    // the last header → the body's last byte
  std::chrono::milliseconds idle_timeout{5000};     // kept alive, waiting for the next request
  std::chrono::milliseconds write_timeout{10000};   // each write, a client that stops reading
};

// What the connection sends next for a request, as its Reply says.
struct ReplyStep {
  enum class Kind {
    kWait,      // nothing yet: ask again after Connection::wake()
    kResponse,  // `response`, complete; the reply is done
    kHead,      // `response`'s header, its body to follow chunked (ask again)
    kChunk,     // `bytes`, the next of the body (ask again once sent)
    kEnd,       // `bytes` (may be empty), then the body's end; the reply is done
    kCut,       // the body cannot be finished: the connection closes without ending it
  };
  Kind kind = Kind::kWait;
  HttpResponse response;
  std::string bytes;

  static ReplyStep wait() { return {}; }
  static ReplyStep respond(HttpResponse response) {
    return {Kind::kResponse, std::move(response), {}};
  }
};

// The answer to one request, driven by the connection on its strand: next() when the connection
// can send, finished() once.
class Reply {
 public:
  virtual ~Reply() = default;
  // What to send now. Throwing cuts the response off (kCut).
  virtual ReplyStep next() = 0;
  // The response was sent in full (`delivered`), or the connection ended first: the client went
  // away, a write timed out, the reply cut its body, or the server stopped.
  virtual void finished(bool delivered) = 0;
};

// Why a request could not be read. The connection closes after answering it.
enum class ReadFailure { kMalformed, kHeadersTooLarge, kBodyTooLarge, kTimeout };

// What the handler says of a request whose headers are in, before its body is read.
struct Screening {
  // The answer instead of reading the body (wrong route or method, no API key, shutting down),
  // or null to read the body and call handle().
  std::shared_ptr<Reply> refusal;
  // Held by the connection while the body arrives, then handed to handle() with the request;
  // dropped if the read fails or the connection closes first (how the handler counts requests on
  // their way in).
  std::shared_ptr<void> arrival;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual Screening screen(const RequestHead& head) = 0;
  // A complete request. `wake` (callable from any thread, copyable, harmless once the
  // connection has gone) makes the connection ask the reply again after a kWait. `arrival` is
  // the request's Screening::arrival (null if screen() gave none), the handler's to keep or drop.
  virtual std::shared_ptr<Reply> handle(HttpRequest request, std::function<void()> wake,
                                        std::shared_ptr<void> arrival) = 0;
  // The reply to a request that could not be read; `head` is what was parsed of it, if anything.
  virtual std::shared_ptr<Reply> unreadable(ReadFailure failure, const RequestHead* head) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `socket`'s executor must be a strand; `handler` must outlive the connection.
  Connection(boost::asio::ip::tcp::socket socket, const ConnectionLimits& limits,
             RequestHandler& handler);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts reading requests.
  void start();
  // Any thread: no new request is read; an idle connection closes now, a busy one after its
  // response (with "Connection: close").
  void drain();
  // Any thread: closes the connection now; the current reply, if any, is finished(false).
  void abort();

 private:
  enum class State { kIdle, kReadingHeader, kReadingBody, kReplying, kLingering, kClosed };

  // Each runs on the connection's strand.
  void read_next();
  void read_header();
  void on_header(boost::system::error_code error);
  void read_body();
  void on_body(boost::system::error_code error);
  // Reads and parses what has arrived, again until the headers (kReadingHeader) or the whole
  // request (kReadingBody) are in, or until the read's deadline has passed.
  void read_request_part(State reading);
  // Answers a request that could not be read (a parse error, a limit, a timeout), or closes the
  // connection when the client has gone.
  void fail_read(boost::system::error_code error);
  void begin_reply(std::shared_ptr<Reply> reply, bool body_unread);
  // Asks the reply for its next step until it waits or a write is in flight.
  void pump();
  void write_response(HttpResponse response);
  // Writes what the client's socket takes of the response, again until all is sent: the write
  // deadline is for each part, so a client reading a large file slowly but steadily is served.
  void write_response_part();
  void write_head(HttpResponse response);
  void write_bytes(std::string bytes, bool last);
  void on_written(boost::system::error_code error, bool reply_done);
  // Keeps a read pending while a reply is made, to see the client go (or pipeline more).
  void watch_client();
  void end_reply(bool delivered);
  // Closes after a response that ends the connection: stops sending, drops what still comes.
  void linger();
  void discard();
  void close();
  // Closes the connection (a write, an idle wait) or ends the read in progress with a 408 when
  // `timer` fires after `timeout`.
  void arm(boost::asio::steady_timer& timer, std::chrono::milliseconds timeout);

  boost::asio::ip::tcp::socket socket_;
  const ConnectionLimits& limits_;
  RequestHandler& handler_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  bool first_request_ = true;
  bool draining_ = false;
  bool read_timed_out_ = false;
  // The request being answered: whether it may be followed by another on this connection,
  // whether its body is still unread (a refusal after the headers), whether its client speaks
  // HTTP/1.1 (chunked bodies) or 1.0 (the body ends with the connection).
  bool request_keep_alive_ = false;
  bool body_unread_ = false;
  bool chunked_ = true;
  bool close_after_reply_ = false;
  std::shared_ptr<Reply> reply_;
  std::shared_ptr<void> arrival_;  // Screening::arrival of the request whose body is read
  // The connection itself while a reply is made: no operation may be pending to hold it (a
  // reply waiting for audio while pipelined requests fill the read buffer).
  std::shared_ptr<Connection> holding_;
  bool writing_ = false;
  bool waiting_ = false;      // the reply said kWait
  bool watching_ = false;     // a read is pending while the reply is made, to see the client go
  bool client_gone_ = false;  // that read saw the client close
  bool streaming_ = false;    // a body is being sent after its head
  size_t lingered_bytes_ = 0;
  // What is being written, kept alive until the write completes.
  std::string out_;
  std::shared_ptr<HttpResponse> out_response_;
  // The whole response's serializer, or a streamed response's for its head.
  std::shared_ptr<http::response_serializer<http::string_body>> out_serializer_;
};

}  // namespace voxd::server
