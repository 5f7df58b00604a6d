package dagster_eventhub_ingest.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * A Java agent for the local Spark driver JVM that starts without a class-data archive: one
 * daemon thread loads, in the order a run loads them, the classes listed in the file named by the
 * agent's argument, so that the driver's own threads find them loaded (see class_preload.py).
 *
 * <p>Each class is loaded by the system class loader, the one that loads Spark's jars, without
 * initialising it: no static initialiser runs here and no class is loaded that a run does not
 * load. A name this class path does not hold is skipped; a list that mostly misses (another
 * Spark's) is given up.
 */
public final class ClassPreload {
    /** Past this many misses, and more misses than classes loaded, the list is not this Spark's. */
    private static final int GIVE_UP_MISSES = 500;

    /** Set once the thread is done: what it loaded, for whoever asks the JVM. */
    static final String DONE_PROPERTY = "ehingest.classPreload";

    private ClassPreload() {}

    public static void premain(String list) {
        if (list == null || list.isEmpty()) {
            return;
        }
        Thread thread = new Thread(() -> load(list), "ehingest-class-preload");
        thread.setDaemon(true);
        thread.start();
    }

    private static void load(String list) {
        ClassLoader loader = ClassLoader.getSystemClassLoader();
        int loaded = 0;
        int missed = 0;
        String end = "";
        try (BufferedReader names = Files.newBufferedReader(Paths.get(list), StandardCharsets.UTF_8)) {
            String name;
            while ((name = names.readLine()) != null) {
                if (name.isEmpty()) {
                    continue;
                }
                try {
                    Class.forName(name, false, loader);
                    loaded++;
                } catch (ClassNotFoundException | LinkageError e) {
                    missed++;
                    if (missed > GIVE_UP_MISSES && missed > loaded) {
                        end = ", given up";
                        break;
                    }
                }
            }
        } catch (IOException e) {
            // No list, no preloading: the run loads its classes itself, as without the agent.
            end = ", no list: " + e;
        }
        System.setProperty(DONE_PROPERTY, loaded + " loaded, " + missed + " missed" + end);
    }
}
