// A URLFrontier client in Java for bench/bench_urlfrontier.py (--java-client): the work
// of its Python client, on grpc-java, as a StormCrawler spout and status updater would do
// it. Built by the bench (javac, with stubs protoc makes from crawlq's own
// urlfrontier.proto); nothing of URLFrontier's own code is used.
//
//   java UfClient TARGET URLS BATCH PREFIX
//
// PutDiscovered: URLS URLs over 500 hosts (https://h<i % 500>.example/PREFIX/p/<i>) in
// batches of BATCH, one stream; then GetURLs calls of max_queues=BATCH in a loop while
// one PutURLs stream, open throughout, answers each URL as it comes with a KnownURLItem
// (done for good), until every URL is acked. Prints ready before PutDiscovered and
// put=<URLs/s> after it, waits for a line on its standard input (the bench reads the
// server's CPU meanwhile), then prints ok=<URLs taken> getack=<URLs/s>.

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.util.Iterator;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import urlfrontier.URLFrontierGrpc;
import urlfrontier.Urlfrontier.AckMessage;
import urlfrontier.Urlfrontier.BatchAck;
import urlfrontier.Urlfrontier.DiscoveredBatch;
import urlfrontier.Urlfrontier.GetParams;
import urlfrontier.Urlfrontier.KnownURLItem;
import urlfrontier.Urlfrontier.URLInfo;
import urlfrontier.Urlfrontier.URLItem;

public final class UfClient {
  /** Counts what a stream answers; ends when it does. */
  private static final class Answers<T> implements StreamObserver<T> {
    final CountDownLatch ended = new CountDownLatch(1);
    final AtomicReference<Throwable> error = new AtomicReference<>();
    final java.util.function.Consumer<T> each;

    Answers(java.util.function.Consumer<T> each) {
      this.each = each;
    }

    @Override
    public void onNext(T value) {
      each.accept(value);
    }

    @Override
    public void onError(Throwable t) {
      error.set(t);
      ended.countDown();
    }

    @Override
    public void onCompleted() {
      ended.countDown();
    }
  }

  public static void main(String[] args) throws Exception {
    String target = args[0];
    int n = Integer.parseInt(args[1]);
    int batch = Integer.parseInt(args[2]);
    String prefix = args[3];
    ManagedChannel channel =
        ManagedChannelBuilder.forTarget(target)
            .usePlaintext()
            .maxInboundMessageSize(64 << 20)
            .build();
    URLFrontierGrpc.URLFrontierStub async = URLFrontierGrpc.newStub(channel);
    URLFrontierGrpc.URLFrontierBlockingStub blocking = URLFrontierGrpc.newBlockingStub(channel);

    AtomicLong taken = new AtomicLong();
    Answers<BatchAck> batchAcks =
        new Answers<>(
            ack -> {
              for (AckMessage.Status s : ack.getStatusesList()) {
                if (s == AckMessage.Status.OK) taken.incrementAndGet();
              }
            });
    // (the bench takes the server's CPU for PutDiscovered from here)
    System.out.println("ready");
    System.out.flush();
    long t0 = System.nanoTime();
    StreamObserver<DiscoveredBatch> put = async.putDiscovered(batchAcks);
    for (int i = 0; i < n; i += batch) {
      DiscoveredBatch.Builder b = DiscoveredBatch.newBuilder().setID(Integer.toString(i));
      for (int j = i; j < Math.min(n, i + batch); j++) {
        b.addItems(
            URLInfo.newBuilder()
                .setUrl("https://h" + (j % 500) + ".example/" + prefix + "/p/" + j)
                .build());
      }
      put.onNext(b.build());
    }
    put.onCompleted();
    batchAcks.ended.await();
    double putSeconds = (System.nanoTime() - t0) / 1e9;
    if (batchAcks.error.get() != null) throw new RuntimeException(batchAcks.error.get());
    // (the bench takes the server's CPU here: it says go when it has)
    System.out.printf("put=%.0f%n", n / putSeconds);
    System.out.flush();
    new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();

    AtomicLong acked = new AtomicLong();
    CountDownLatch all = new CountDownLatch(1);
    Answers<AckMessage> acks =
        new Answers<>(
            ack -> {
              if (acked.incrementAndGet() == n) all.countDown();
            });
    t0 = System.nanoTime();
    StreamObserver<URLItem> answers = async.putURLs(acks);
    long handed = 0;
    while (handed < n) {
      int got = 0;
      Iterator<URLInfo> urls = blocking.getURLs(GetParams.newBuilder().setMaxQueues(batch).build());
      while (urls.hasNext()) {
        URLInfo info = urls.next();
        got++;
        answers.onNext(
            URLItem.newBuilder().setKnown(KnownURLItem.newBuilder().setInfo(info)).build());
      }
      handed += got;
      if (got == 0) Thread.sleep(1);
      if (acks.error.get() != null) throw new RuntimeException(acks.error.get());
    }
    all.await();
    double getSeconds = (System.nanoTime() - t0) / 1e9;
    answers.onCompleted();
    acks.ended.await();
    channel.shutdownNow();
    System.out.printf("ok=%d getack=%.0f%n", taken.get(), n / getSeconds);
  }
}
